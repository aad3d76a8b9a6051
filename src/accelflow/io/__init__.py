"""Reading input data: the IDX format of MNIST and Fashion-MNIST, raw or gzip.

The implementation lives in private modules (``_idx``: header and whole-file reads,
``_idx_file``: ranged reads for split sources, ``_pairs``: images + labels together,
``_fashion_mnist``: locating the files); this namespace only re-exports them.

Example: the 10,000 Fashion-MNIST test images and labels, whole or as 2 splits::

    from accelflow.io import find_fashion_mnist, open_labeled_pair, read_labeled_pair

    files = find_fashion_mnist()  # $ACCELFLOW_DATA_DIR or /usr/share/datasets/fashion-mnist
    images, labels = read_labeled_pair(*files.test)  # uint8 (10000, 28, 28), uint8 (10000,)

    with open_labeled_pair(*files.test) as pair:
        start, stop = pair.splits(2)[1]
        images, labels = pair.read_range(start, stop)
"""

from accelflow._exports import publish
from accelflow.io._fashion_mnist import (
    DATA_DIR_ENV_VAR,
    DEBIAN_FASHION_MNIST_DIR,
    FASHION_MNIST_URL,
    FashionMnistFiles,
    find_fashion_mnist,
)
from accelflow.io._idx import IDX_TYPE_CODES, IdxHeader, read_idx, read_idx_header
from accelflow.io._idx_file import IdxFile, open_idx, split_ranges
from accelflow.io._pairs import (
    DEFAULT_NUM_CLASSES,
    IdxPair,
    check_label_values,
    check_pair_headers,
    open_labeled_pair,
    read_labeled_pair,
)

__all__ = [
    "DATA_DIR_ENV_VAR",
    "DEBIAN_FASHION_MNIST_DIR",
    "DEFAULT_NUM_CLASSES",
    "FASHION_MNIST_URL",
    "IDX_TYPE_CODES",
    "FashionMnistFiles",
    "IdxFile",
    "IdxHeader",
    "IdxPair",
    "check_label_values",
    "check_pair_headers",
    "find_fashion_mnist",
    "open_idx",
    "open_labeled_pair",
    "read_idx",
    "read_idx_header",
    "read_labeled_pair",
    "split_ranges",
]

publish(globals(), __all__)
