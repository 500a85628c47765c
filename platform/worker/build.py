"""A trial's untrained model and its data: seeding, batch size, the mini-batch feeds of each split."""
from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from ndebench.datasets.files import resolve_data_dir
from ndebench.datasets.registry import create_dataset, dataset_info
from ndebench.models.base import DataSpec, NDEClassifier, TimedInputs, index_batch, inputs_to
from ndebench.models.registry import create_model
from ndebench.models.timeseries import natural_splines_kept_in
from ndebench.platform.failures.deadline import Deadline
from ndebench.platform.worker.spec import TrialSpec
from ndebench.platform.worker.stacklayers import with_stack_kernel
from ndebench.regularizers.registry import create_regularizer


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def auto_batch_size(n_total: int) -> int:
    """The reference pipeline's rule: the largest ``2^i``, ``i`` in 4..7, with ``2^i <= N/2`` (at least 16).

    ``N`` is the size of the whole data set before the split (torch-ists' ``model_run.py`` takes
    ``X.shape[0]`` after concatenating the archive's train and test files), not the training split.
    """
    size = 16
    for i in range(4, 8):
        if 2**i <= n_total / 2:
            size = 2**i
    return size


def resolve_batch_size(setting: int | str, bundle: Any) -> int:
    """``training.batch_size``: an integer as is; ``auto``: the data set's own batch size from the paper
    (``extra["batch_size"]``, e.g. 64 for STL-10) where it has one, else :func:`auto_batch_size` of N."""
    if setting != "auto":
        return int(setting)
    return int(bundle.extra.get("batch_size") or auto_batch_size(bundle.num_samples))


class Feed:
    """Mini-batches of one split: prepared tensors for time series (with each sample's final observation
    index where the split has one), a DataLoader for image datasets. ``deadline`` is checked before each batch."""

    def __init__(self, model: NDEClassifier, bundle: Any, split: Any, device: torch.device):
        self.device, self.deadline = device, Deadline(None)
        if bundle.input_kind == "image":
            self.dataset, self.inputs, self.targets = split, None, None
        else:
            inputs = model.prepare(bundle.times, split.values, split.static)
            if split.final_index is not None:
                inputs = TimedInputs(inputs, split.final_index)
            self.inputs = inputs_to(inputs, device)
            self.targets = split.targets.to(device)

    def __len__(self) -> int:
        return len(self.dataset) if self.inputs is None else int(self.targets.shape[0])

    def batches(self, batch_size: int, generator: torch.Generator | None) -> Iterator[tuple[Any, torch.Tensor]]:
        """Mini-batches in shuffled order when ``generator`` is given (training), else in order. A shuffled
        pass skips a last batch of one sample: the head's BatchNorm cannot train on it."""
        training = generator is not None
        if self.inputs is None:
            loader = torch.utils.data.DataLoader(self.dataset, batch_size=batch_size, shuffle=training,
                                                 generator=generator)
            for x, y in loader:
                self.deadline.check()
                if not (training and len(y) == 1):
                    yield x.to(self.device), y.to(self.device)
            return
        n = len(self)
        order = torch.randperm(n, generator=generator) if training else torch.arange(n)
        for start in range(0, n, batch_size):
            self.deadline.check()
            index = order[start:start + batch_size].to(self.device)
            if not (training and len(index) == 1):
                yield index_batch(self.inputs, index), self.targets[index]



@dataclass
class BuiltTrial:
    """A trial's untrained model, its data feeds and what training needs (``num_classes`` K: chance ``ln K``)."""

    model: NDEClassifier
    feeds: dict[str, Feed]
    batch_size: int
    pos_weight: float | None
    metric_name: str
    num_classes: int

    @property
    def top5(self) -> bool:
        """Whether evaluation computes top-5 accuracy: the dataset's primary metric is ``top5_accuracy``."""
        return self.metric_name == "top5_accuracy"


def data_spec(bundle: Any) -> DataSpec:
    """What the model is told of a dataset bundle (time-series or image), read from it in this one place."""
    if bundle.input_kind == "image":
        return DataSpec(bundle.channels, bundle.num_classes, bundle.task == "binary", image_size=bundle.image_size)
    static = bundle.train.static
    return DataSpec(bundle.channels, bundle.num_classes, bundle.task == "binary", times=bundle.times,
                    static_channels=0 if static is None else static.shape[1], count_channels=bundle.count_channels)


def build_trial(spec: TrialSpec) -> BuiltTrial:
    """Seed Python, NumPy and torch from ``spec.seed``, load the data and build the model of ``spec`` (untrained:
    :func:`run_trial` trains it, re-evaluation loads trained weights with ``load_state_dict``)."""
    seed_everything(spec.seed)
    if spec.training.threads:
        torch.set_num_threads(spec.training.threads)
    device = torch.device(spec.device)
    bundle = create_dataset(spec.dataset, seed=spec.seed, data_dir=spec.data_dir, **dict(spec.dataset_options))
    regularizer = create_regularizer(spec.regularizer, **spec.regularizer_params)
    binary = bundle.task == "binary"
    model = with_stack_kernel(create_model(spec.model, data_spec(bundle), regularizer=regularizer,
                                           solver=spec.solver, **spec.model_params).to(device))
    data_dir = resolve_data_dir(spec.data_dir)
    with natural_splines_kept_in(data_dir if data_dir.is_dir() else None):
        feeds = {name: Feed(model, bundle, getattr(bundle, name), device) for name in ("train", "val", "test")}
    return BuiltTrial(model, feeds, resolve_batch_size(spec.training.batch_size, bundle),
                      bundle.extra.get("pos_weight") if binary else None, dataset_info(spec.dataset).metric,
                      bundle.num_classes)
