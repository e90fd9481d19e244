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
    (tmp_path / "dangling.yaml").symlink_to(tmp_path / "nowhere.yaml")  # gone while read: skipped, as /proc's are
    assert yaml_files_under(tmp_path) == [tmp_path / "gpus.yaml", tmp_path / "sub" / "more.yaml"]
    assert yaml_files_under(tmp_path, recursive=False) == [tmp_path / "gpus.yaml"]
    os.mkfifo(tmp_path / "sub" / "pipe.yaml")  # a read would block: refused, never skipped in silence
    with pytest.raises(BadInput, match="pipe.yaml is not a regular file"):
        yaml_files_under(tmp_path)
    assert yaml_files_under(tmp_path, recursive=False) == [tmp_path / "gpus.yaml"]


def test_an_html_page_never_carries_a_terminal_sequence_or_bidi_mark(tmp_path: Path) -> None:
    """The model's folder name is shown on the page: escaped there as in the terminal (\\x1b, \\u202e)."""
    import re
    import shutil
    import subprocess
    import sys

    folder = tmp_path / "cfg\u202eevil\x1b[31m\u200b"
    folder.mkdir()
    shutil.copy(Path(__file__).parent / "data" / "gemma-3-4b-it.config.json", folder / "config.json")
    page = tmp_path / "page.html"
    done = subprocess.run([sys.executable, "-m", "gemma_fit", "check", "--model", str(folder), "--gpu", "rtx-4090",
                           "--html", str(page)], capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    text = page.read_text(encoding="utf-8")
    assert "\\u202e" in text and not re.search("[\x00-\x08\x0b-\x1f\u200b-\u200f\u202a-\u202e\u2066-\u2069]", text)


@pytest.mark.parametrize("command", [
    ["check", "--model", "9b"],
    ["report", "--model", "9b"],
])
def test_html_aimed_at_the_commands_own_input_is_refused_and_the_file_kept(tmp_path: Path, command: list[str]) -> None:
    """`--html machine.yaml` (or a link to it) would replace the user's machine file with a page."""
    import subprocess
    import sys

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "gemma_fit", *args], capture_output=True, text=True, check=False)

    machine = tmp_path / "m.yaml"
    text = "name: box\ngpus: [rtx-4090]\nram_gb: 64\n"
    machine.write_text(text)
    (tmp_path / "link.yaml").symlink_to(machine)
    for target in (machine, tmp_path / "link.yaml"):
        res = run(*command, "--hardware", str(machine), "--html", str(target))
        assert res.returncode == 2, res.stderr
        assert "read it as input" in res.stderr and len(res.stderr.splitlines()) == 1
        assert machine.read_text() == text and (tmp_path / "link.yaml").is_symlink()
    ok = run(*command, "--hardware", str(machine), "--html", str(tmp_path / "page.html"))
    assert ok.returncode == 0 and (tmp_path / "page.html").read_text().startswith("<!")


def test_synth_will_not_write_over_the_config_it_reads(tmp_path: Path) -> None:
    from gemma_fit.base.files import note_input, refuse_input

    f = tmp_path / "config.json"
    f.write_text("{}")
    refuse_input(f)  # not read yet: allowed
    note_input(os.stat(f))
    with pytest.raises(BadInput, match="read it as input"):
        refuse_input(f)
