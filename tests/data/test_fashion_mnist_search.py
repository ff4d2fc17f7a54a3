"""Where the Fashion-MNIST importer looks for the IDX files when no folder is given:
$DPEMB_FASHION_MNIST_DIR, dpkg -L, /usr/share/datasets/fashion-mnist, ~/.cache/dpemb
(also the .deb extracted there without root rights by `make fashion-mnist`)."""

from __future__ import annotations

import os

import pytest

from dpemb.data.dataset import DataError
from dpemb.data.importers import fashion_mnist as fm
from dpemb.data.importers import import_fashion_mnist
from tests.data.test_importers import make_fashion_fixture


@pytest.fixture()
def isolated(tmp_path, monkeypatch):
    """No system install, an empty home cache, no environment override."""
    monkeypatch.setattr(fm, "_dpkg_listed_dirs", lambda: [])
    monkeypatch.setattr(fm, "KNOWN_DIRS", [tmp_path / "system" / "usr/share/datasets/fashion-mnist"])
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("DPEMB_CACHE", raising=False)
    monkeypatch.delenv(fm.ENV_DIR, raising=False)
    return tmp_path


def test_nothing_found_names_make_target_and_dir_flags(isolated):
    with pytest.raises(DataError) as e:
        import_fashion_mnist()
    msg = str(e.value)
    for want in ("make fashion-mnist", "--dir", "--fashion-mnist-dir", fm.ENV_DIR,
                 "apt-get install dataset-fashion-mnist", str(isolated / "home/.cache/dpemb/fashion-mnist")):
        assert want in msg, (want, msg)


def test_home_cache_folder_is_found(isolated):
    make_fashion_fixture(isolated / "home/.cache/dpemb/fashion-mnist")
    assert import_fashion_mnist().num_examples == 7
    assert import_fashion_mnist(split="test").num_examples == 3


def test_deb_extracted_without_root_is_found(isolated, monkeypatch):
    # `apt-get download dataset-fashion-mnist && dpkg-deb -x *.deb ~/.cache/dpemb/debroot`
    make_fashion_fixture(isolated / "home/.cache/dpemb/debroot/usr/share/datasets/fashion-mnist")
    assert import_fashion_mnist().num_examples == 7
    # DPEMB_CACHE moves the cache
    monkeypatch.setenv("DPEMB_CACHE", str(isolated / "elsewhere"))
    with pytest.raises(DataError, match="make fashion-mnist"):
        import_fashion_mnist()
    make_fashion_fixture(isolated / "elsewhere/fashion-mnist", gz=False)
    assert import_fashion_mnist().num_examples == 7


def test_environment_variable_folders_come_first(isolated, monkeypatch):
    make_fashion_fixture(isolated / "a", n_train=4)
    make_fashion_fixture(isolated / "home/.cache/dpemb/fashion-mnist", n_train=7)
    monkeypatch.setenv(fm.ENV_DIR, os.pathsep.join([str(isolated / "missing"), str(isolated / "a")]))
    assert fm.candidate_dirs()[:2] == [isolated / "missing", isolated / "a"]
    assert import_fashion_mnist().num_examples == 4


def test_system_folder_wins_over_the_cache(isolated, monkeypatch):
    system = isolated / "system/usr/share/datasets/fashion-mnist"
    make_fashion_fixture(system, n_train=5)
    make_fashion_fixture(isolated / "home/.cache/dpemb/fashion-mnist", n_train=7)
    assert fm.find_fashion_mnist_dir() == system
    assert import_fashion_mnist().num_examples == 5


def test_a_given_folder_without_the_files_says_what_to_do(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match=r"empty: no train-images-idx3-ubyte\.gz.*make fashion-mnist"):
        import_fashion_mnist(tmp_path / "empty")
    with pytest.raises(DataError, match=r"nowhere: Fashion-MNIST folder not found"):
        import_fashion_mnist(tmp_path / "nowhere")
