# ndebench on a Ray cluster (KubeRay, `ray up`, or plain `docker run`): Ray 2.60 on Python 3.11 with ndebench and
# its `cluster` extra (dashboard and job API, MLflow basic auth, system metrics) at the tested versions.
#   CPU (default):  docker build -t ndebench .
#   CUDA:           docker build --build-arg RAY_IMAGE=rayproject/ray:2.60.0-py311-gpu -t ndebench:gpu .
# The package records its version and git commit at build time (pass --build-arg GIT_COMMIT=$(git rev-parse HEAD)
# when the build context has no .git).
ARG RAY_IMAGE=rayproject/ray:2.60.0-py311-cpu
FROM ${RAY_IMAGE}

ARG GIT_COMMIT=""
ENV NDEBENCH_GIT_COMMIT=${GIT_COMMIT}
WORKDIR /home/ray/ndebench
COPY --chown=ray:users . .
# constraints.txt pins every library to the versions the test suite ran with; torch comes from the CUDA or CPU
# index matching the base image.
RUN pip install --no-cache-dir -c constraints.txt '.[cluster,audio]' \
    && python -m ndebench.platform --version
WORKDIR /home/ray
