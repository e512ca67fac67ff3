"""The four MNIST files: names, the digests of their decompressed contents, the splits, the
default mirrors and the IDX constants. Standard library only, and nothing of the package: the
workflow imports it when it plans a study (``workflow/rules/data.smk``).
"""

from __future__ import annotations

#: File name -> MD5 (hex) of the decompressed IDX file, as published by torchvision. The order
#: is the order of :func:`fetch`'s result: train images, train labels, test images, test labels.
MD5: dict[str, str] = {
    "train-images-idx3-ubyte": "6bbc9ace898e44ae57da46a324031adb",
    "train-labels-idx1-ubyte": "a25bea736e30d166cdddb491f175f624",
    "t10k-images-idx3-ubyte": "2646ac647ad5339dbf082846283269ea",
    "t10k-labels-idx1-ubyte": "27ae3e4e09519cfbb04c329615203637",
}
FILES: tuple[str, ...] = tuple(MD5)

#: Split name -> (images file, labels file). Allowed splits: ``train``, ``test``.
SPLITS: dict[str, tuple[str, str]] = {
    "train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
    "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
}

#: Tried in this order after any user mirrors: the PyTorch-hosted copy, then the original site
#: (the same two torchvision uses). Each holds ``NAME.gz``.
DEFAULT_MIRRORS: tuple[str, ...] = (
    "https://ossci-datasets.s3.amazonaws.com/mnist/",
    "http://yann.lecun.com/exdb/mnist/",
)

IMAGE_SIDE = 28  # pixels; MNIST images are IMAGE_SIDE x IMAGE_SIDE
NUM_CLASSES = 10  # labels are 0 .. NUM_CLASSES - 1
IMAGES_MAGIC = 2051  # 0x00000803: uint8, 3 dimensions
LABELS_MAGIC = 2049  # 0x00000801: uint8, 1 dimension
UBYTE = 0x08  # IDX type code of unsigned bytes
