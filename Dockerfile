# ndebench on a Ray cluster (KubeRay, `ray up`, or plain `docker run`): Ray 2.60 on Python 3.11 with ndebench and
# its `cluster` extra (dashboard and job API, MLflow basic auth, system metrics) at the tested versions.
#   CPU (default):  docker build -t ndebench .
#   CUDA:           docker build --build-arg RAY_IMAGE=rayproject/ray:2.60.0-py311-gpu \
#                                --build-arg TORCH_INDEX=https://pypi.org/simple -t ndebench:gpu .
# GPU nodes need an NVIDIA driver for CUDA 13 (torch 2.14.1+cu130): R580 or newer.
# The build writes the version and git commit into the package; .dockerignore keeps .git out of the context, so pass
# --build-arg GIT_COMMIT=$(git rev-parse HEAD).
ARG RAY_IMAGE=rayproject/ray:2.60.0-py311-cpu
FROM ${RAY_IMAGE}

# PyPI's Linux torch wheels are CUDA builds (several GB); the CPU image takes torch 2.14.1 from PyTorch's CPU index.
ARG TORCH_INDEX=https://download.pytorch.org/whl/cpu
ARG GIT_COMMIT=""
ENV NDEBENCH_GIT_COMMIT=${GIT_COMMIT}
WORKDIR /home/ray/ndebench
COPY --chown=ray:users . .
# constraints.txt pins every library to the versions the test suite ran with.
RUN pip install --no-cache-dir --extra-index-url "${TORCH_INDEX}" -c constraints.txt '.[cluster,audio]' \
    && python -m ndebench.platform --version
WORKDIR /home/ray
