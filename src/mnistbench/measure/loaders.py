"""The two ways a cell feeds the model, with the same settings on every device:

- ``dataloader``: the blog's pipeline, run on torchvision itself: ``torchvision.datasets.MNIST``
  over the verified files (download off: ``mnistbench fetch`` is the one downloader), each
  sample a PIL image, then ``transforms.ToTensor`` and ``Normalize((0.1307,), (0.3081,))``,
  batched by ``torch.utils.data.DataLoader`` (``workers`` and ``pin_memory`` as the cell
  says), each batch then copied to the device. (Measured side by side on 2 cores of an
  AVX-512 Xeon, an epoch of this pipeline's batches takes about 2.5x what the project's own
  re-implementation of the same steps took, 4.7 s against 1.9 s: the blog's code as it is.)
- ``resident``: the whole normalised split as one tensor on the training device; batches are
  shuffled index selections.

Both give warm-up batches (``Loaders.sample_batch``) without touching the shuffling generator.
A resident training batch of the warm-up is drawn the way the timed loop draws one (a
permutation on the host, copied to the device, then ``index_select``), from a generator of its
own (:data:`WARMUP_SHUFFLE_SEED`), so first-use costs of that path (the copy, the gather
kernels) fall in the warm-up and not in timed epoch 1; a test batch is sliced, as the timed
evaluation slices it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from mnistbench.core.devices import Loader
from mnistbench.data import mnist as data

#: MNIST normalisation of the classic pipeline (torchvision's Normalize((0.1307,), (0.3081,))).
MNIST_MEAN = 0.1307
MNIST_STD = 0.3081
#: Seed of the warm-up's own shuffling generator (resident loader): the warm-up runs the timed
#: data path without drawing from the cell's shuffling generator.
WARMUP_SHUFFLE_SEED = 0x5EED


def torchvision_mnist(root, split: str, limit: int | None):
    """torchvision's MNIST dataset of ``split`` (train or test) over the verified IDX files in
    ``root``, with the blog's transforms, cut to its first ``limit`` samples when given."""
    from torchvision import datasets, transforms

    class VerifiedMNIST(datasets.MNIST):
        """torchvision's MNIST reading the four files where ``mnistbench fetch`` verified
        them (torchvision looks in ROOT/MNIST/raw)."""

        @property
        def raw_folder(self) -> str:
            return str(root)

    transform = transforms.Compose([transforms.ToTensor(),
                                    transforms.Normalize((MNIST_MEAN,), (MNIST_STD,))])
    dataset = VerifiedMNIST(str(root), train=split == "train", download=False,
                            transform=transform)
    if limit:
        dataset.data, dataset.targets = dataset.data[:limit], dataset.targets[:limit]
    return dataset


class ResidentLoader:
    """The whole normalised split as one tensor on the training device; batches are shuffled
    index selections. The permutation comes from a CPU generator, so CPU and GPU cells with
    the same seed see the same batches."""

    def __init__(self, images: torch.Tensor, labels: torch.Tensor, batch_size: int, *,
                 shuffle: bool, generator: torch.Generator | None) -> None:
        self.images, self.labels = images, labels
        self.batch_size, self.shuffle, self.generator = batch_size, shuffle, generator

    def __len__(self) -> int:
        return -(-len(self.labels) // self.batch_size)

    def epoch_order(self) -> torch.Tensor:
        """The next epoch's shuffle order, drawn on the host from the loader's generator and
        copied to the device (one draw per epoch: the batches of a seed on every device)."""
        order = torch.randperm(len(self.labels), generator=self.generator)
        return order.to(self.images.device)

    def batch(self, order: torch.Tensor, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The batch starting at position ``i`` of ``order``: an ``index_select`` of both
        tensors (the timed data path)."""
        idx = order[i : i + self.batch_size]
        return self.images.index_select(0, idx), self.labels.index_select(0, idx)

    def __iter__(self):
        n = len(self.labels)
        if self.shuffle:
            order = self.epoch_order()
            for i in range(0, n, self.batch_size):
                yield self.batch(order, i)
        else:
            for i in range(0, n, self.batch_size):
                yield self.images[i : i + self.batch_size], self.labels[i : i + self.batch_size]


def normalised_tensor(images: np.ndarray, device: torch.device) -> torch.Tensor:
    """uint8 (N, 28, 28) -> float32 (N, 1, 28, 28) normalised like the classic pipeline."""
    x = torch.from_numpy(images).to(device).unsqueeze(1).float()
    return x.div_(255).sub_(MNIST_MEAN).div_(MNIST_STD)


@dataclass
class Loaders:
    """The training and test loaders of a cell, and a way to get warm-up batches from them
    without touching the shuffling generator."""

    #: A ResidentLoader, or the DataLoader's batches moved to the device (_DeviceLoader);
    #: a whole-step capture cell's is always a ResidentLoader (its epoch_order, its tensors).
    train: Any
    test: Any
    train_size: int
    test_size: int
    #: (split, size) -> (x, y) on the device, not shuffled.
    sample_batch: Callable[[str, int], tuple[torch.Tensor, torch.Tensor]]


def build_loaders(cfg, device: torch.device, shuffle_gen: torch.Generator) -> Loaders:
    """Read the verified IDX files and build both loaders of ``cfg.loader`` (``cfg``: a
    :class:`mnistbench.measure.cellconfig.TrainConfig`: data, loader, batch sizes, limits,
    workers, pin_memory)."""
    # Our reader first, for both loaders: it checks the files' format with errors that name
    # the file and the fix, and gives the split sizes.
    train_x, train_y = data.load_split(cfg.data, "train")
    test_x, test_y = data.load_split(cfg.data, "test")
    if cfg.train_limit:
        train_x, train_y = train_x[: cfg.train_limit], train_y[: cfg.train_limit]
    if cfg.test_limit:
        test_x, test_y = test_x[: cfg.test_limit], test_y[: cfg.test_limit]
    splits = {"train": (train_x, train_y), "test": (test_x, test_y)}
    limits = {"train": cfg.train_limit, "test": cfg.test_limit}

    if cfg.loader == Loader.RESIDENT:
        tensors = {
            name: (normalised_tensor(x, device), torch.from_numpy(y.astype(np.int64)).to(device))
            for name, (x, y) in splits.items()
        }
        train = ResidentLoader(*tensors["train"], cfg.batch_size, shuffle=True,
                               generator=shuffle_gen)
        test = ResidentLoader(*tensors["test"], cfg.eval_batch_size, shuffle=False,
                              generator=None)

        def sample_batch(split: str, size: int):
            x, y = tensors[split]
            if split == "test":  # the evaluation slices, as the timed test loader does
                return x[:size], y[:size]
            # The timed training path: a host permutation copied over, then index_select.
            warm = ResidentLoader(x, y, size, shuffle=True,
                                  generator=torch.Generator().manual_seed(WARMUP_SHUFFLE_SEED))
            return warm.batch(warm.epoch_order(), 0)
    else:
        datasets = {name: torchvision_mnist(cfg.data, name, limits[name]) for name in splits}
        non_blocking = cfg.pin_memory and device.type == "cuda"

        def make(ds, batch_size, shuffle):
            # A fresh keyword set per loader: settings never leak between them.
            return torch.utils.data.DataLoader(
                ds, batch_size=batch_size, shuffle=shuffle, num_workers=cfg.workers,
                pin_memory=cfg.pin_memory, generator=shuffle_gen if shuffle else None)

        train = make(datasets["train"], cfg.batch_size, True)
        test = make(datasets["test"], cfg.eval_batch_size, False)
        collate = torch.utils.data.default_collate

        def sample_batch(split: str, size: int):
            ds = datasets[split]
            x, y = collate([ds[i] for i in range(min(size, len(ds)))])
            return x.to(device, non_blocking=non_blocking), y.to(device, non_blocking=non_blocking)

        train = _DeviceLoader(train, device, non_blocking)
        test = _DeviceLoader(test, device, non_blocking)
    return Loaders(train, test, len(train_y), len(test_y), sample_batch)


class _DeviceLoader:
    """Moves a DataLoader's batches to the device (the copy is part of the data phase)."""

    def __init__(self, loader, device: torch.device, non_blocking: bool) -> None:
        self.loader, self.device, self.non_blocking = loader, device, non_blocking

    def __len__(self) -> int:
        return len(self.loader)

    def __iter__(self):
        for x, y in self.loader:
            yield (x.to(self.device, non_blocking=self.non_blocking),
                   y.to(self.device, non_blocking=self.non_blocking))
