"""Files and folders the user names: written without replacing what is not a regular file, read without following
a loop or a vanishing folder (hostile-input findings of 2026-12-03)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gemma_fit.base.errors import BadInput
from gemma_fit.base.files import write_text
from gemma_fit.db.files import yaml_files_under


def test_writing_through_a_link_loop_is_one_clear_refusal(tmp_path: Path) -> None:
    loop = tmp_path / "loop.html"
    loop.symlink_to(loop)
    with pytest.raises(BadInput, match="link loop"):
        write_text(loop, "<html></html>")
    assert loop.is_symlink()


def test_a_database_folder_is_read_without_loops_devices_or_pipes(tmp_path: Path) -> None:
    (tmp_path / "gpus.yaml").write_text("gpus: []\n")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "more.yaml").write_text("gpus: []\n")
    (tmp_path / "sub" / "back").symlink_to(tmp_path)  # a loop through a folder link
    os.mkfifo(tmp_path / "pipe.yaml")
    (tmp_path / "dangling.yaml").symlink_to(tmp_path / "nowhere.yaml")
    assert yaml_files_under(tmp_path) == [tmp_path / "gpus.yaml", tmp_path / "sub" / "more.yaml"]
    assert yaml_files_under(tmp_path, recursive=False) == [tmp_path / "gpus.yaml"]
