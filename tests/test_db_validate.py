"""db validate: the repo's databases pass; broken copies fail, naming file, line, entry and field."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from gemma_fit.cli.hardware import db_app
from gemma_fit.db.files import packaged_dir
from gemma_fit.jobs.validate import Problem, validate, validate_paths

PROBLEM_LINE = re.compile(r"^\S+:\d+: \S+: .+$")
WORKSTATION = Path("gpus") / "nvidia-workstation.yaml"


def test_repo_databases_pass() -> None:
    report = validate()
    assert report.problems == [], "\n".join(map(str, report.problems))
    assert report.counts["gpus"] >= 77 and report.counts["models"] == 17
    assert report.counts["storage"] == 5 and report.counts["interconnects"] >= 16


@pytest.fixture()
def hw_copy(tmp_path: Path) -> Path:
    target = tmp_path / "hardware_db"
    shutil.copytree(packaged_dir("hardware_db"), target)
    return target


def edit_entry(path: Path, entry_id: str, old: str, new: str) -> None:
    """Replace `old` by `new` inside one entry (from its `- id:` line to the next entry)."""
    text = path.read_text(encoding="utf-8")
    start = text.index(f'  - id: "{entry_id}"')
    end = text.find("\n  - id:", start + 1)
    end = len(text) if end < 0 else end
    block = text[start:end]
    assert old in block, f"{old!r} not in {entry_id}"
    path.write_text(text[:start] + block.replace(old, new, 1) + text[end:], encoding="utf-8")


def line_text(problem: Problem) -> str:
    assert problem.line is not None
    return problem.file.read_text(encoding="utf-8").splitlines()[problem.line - 1]


@pytest.mark.parametrize(
    ("old", "new", "field", "message", "on_line"),
    [
        ("memory_bytes: 17179869184", "memory_bytes: -17179869184", "a4000.memory_bytes", "greater than",
         "memory_bytes"),
        ("memory_bandwidth_gbps: 448", "memory_bandwidth_gbps: 4480", "a4000.memory_bandwidth_gbps",
         "disagrees with bus_width_bits / 8 x memory_data_rate_gbps", "memory_bandwidth_gbps"),
        ("memory_bandwidth_gbps: 448", "memory_bandwidth_gbps: 44.8", "a4000.memory_bandwidth_gbps", "-90%",
         "memory_bandwidth_gbps"),
        ('    source: "https://www.nvidia.com', '    sauce: "https://www.nvidia.com', "a4000.source",
         "missing required key 'source'", 'id: "a4000"'),
        ("memory_type:", "memroy_type:", "a4000.memroy_type", "unknown key 'memroy_type' (did you mean 'memory_type'?)",
         "memroy_type"),
        ("memory_bytes: 17179869184", "memory_bytes: 16", "a4000.memory_bytes", "looks like GiB", "memory_bytes: 16"),
        ("fp16_tensor_tflops: 76.7", "fp16_tensor_tflops: 76700", "a4000.fp16_tensor_tflops", "", "fp16"),
        ("fp16_tensor_tflops: 76.7", "fp16_tensor_tflops: 1534", "a4000.fp16_tensor_tflops", "plausible", "fp16"),
        ("pcie_lanes: 16", "pcie_lanes: 12", "a4000.pcie_lanes", "", "pcie_lanes"),
        ("pcie_gen: 4", "pcie_gen: 7", "a4000.pcie_gen", "", "pcie_gen"),
        ("usable_memory_bytes: 17171480576", "usable_memory_bytes: 27171480576", "a4000", "exceeds memory_bytes",
         'id: "a4000"'),
        ('    source: "https://www.nvidia.com', '    source: "www.nvidia.com', "a4000.source", "pattern", "source"),
        ('backend: "cuda"', 'backend: "metal"', "a4000", "not a llama.cpp backend for nvidia", 'id: "a4000"'),
        ("boost_clock_mhz: 1560", "boost_clock_mhz: 17000", "a4000.boost_clock_mhz", "", "boost_clock_mhz"),
        ("fp32_tflops: 19.17", "fp32_tflops: 191.7", "a4000.fp32_tflops", "61442 FP32 lanes", "fp32_tflops"),
        ("boost_clock_mhz: 1560", "boost_clock_mhz: 156", "a4000.fp32_tflops", "outside 256-10752 for ampere",
         "fp32_tflops"),
        ("fp32_tflops: 19.17", "fp32_tflops: 1.917", "a4000.fp32_tflops", "= 40.0, outside 1.5-20 for ampere",
         "fp32_tflops"),
    ],
)
def test_broken_gpu_entry_is_named(hw_copy: Path, old: str, new: str, field: str, message: str, on_line: str) -> None:
    path = hw_copy / WORKSTATION
    edit_entry(path, "a4000", old, new)
    problems = validate_paths([hw_copy])
    assert problems, "expected a problem"
    mine = [p for p in problems if p.field == field]
    assert mine, "\n".join(map(str, problems))
    assert message in mine[0].message
    assert mine[0].file == path and on_line in line_text(mine[0])
    assert PROBLEM_LINE.match(str(mine[0])), str(mine[0])


@pytest.mark.parametrize(("new", "message"), [
    ("boost_clock_ghz: 0", "greater than or equal to 0.5"),  # MHz typed as GHz is caught the other way
    ("boost_clock_ghz: 5700", "less than or equal to 7"),
    ("boost_clock_ghz: .nan", "less than or equal to 7"),
    ('boost_clock_ghz: "fast"', "valid number"),
])
def test_a_cpu_boost_clock_out_of_range_is_named(hw_copy: Path, new: str, message: str) -> None:
    path = hw_copy / "cpus.yaml"
    edit_entry(path, "ryzen-9-7950x", "boost_clock_ghz: 5.7", new)
    problems = [p for p in validate_paths([hw_copy]) if p.field == "ryzen-9-7950x.boost_clock_ghz"]
    assert problems and message in problems[0].message
    assert "boost_clock_ghz" in line_text(problems[0])


def test_tensor_figure_on_an_arch_without_tensor_units(hw_copy: Path) -> None:
    """Pascal and RDNA 2 have no matrix units: a tensor figure there (e.g. the FP32 rate) is flagged."""
    path = hw_copy / "gpus" / "nvidia-datacenter.yaml"
    edit_entry(path, "p40", "fp16_tensor_tflops: null", "fp16_tensor_tflops: 11.76")
    mine = [p for p in validate_paths([hw_copy]) if p.field == "p40.fp16_tensor_tflops"]
    assert mine and "pascal has no tensor (matrix) units" in mine[0].message
    assert "fp16_tensor_tflops" in line_text(mine[0])


def test_fp32_of_a_part_without_tensor_units_is_checked_against_its_clock(hw_copy: Path) -> None:
    """No tensor rate to compare with on Pascal: the FP32 lanes the clock implies still name a 10x slip."""
    path = hw_copy / "gpus" / "nvidia-datacenter.yaml"
    edit_entry(path, "p40", "fp32_tflops: 11.76", "fp32_tflops: 117.6")
    mine = [p for p in validate_paths([hw_copy]) if p.field == "p40.fp32_tflops"]
    assert mine and "38406 FP32 lanes" in mine[0].message and "outside 256-3840 for pascal" in mine[0].message
    assert "fp32_tflops: 117.6" in line_text(mine[0])


def test_duplicate_id_across_files(hw_copy: Path) -> None:
    edit_entry(hw_copy / "gpus" / "nvidia-geforce.yaml", "rtx-4090", 'id: "rtx-4090"', 'id: "a4000"')
    problems = validate_paths([hw_copy])
    dup = [p for p in problems if "duplicate id 'a4000'" in p.message]
    assert len(dup) == 1
    names = {dup[0].file.name, Path(dup[0].message.split("also at ")[1].split(":")[0]).name}
    assert names == {"nvidia-geforce.yaml", "nvidia-workstation.yaml"}  # both places are named
    assert 'id: "a4000"' in line_text(dup[0])


def test_alias_naming_two_gpus(hw_copy: Path) -> None:
    edit_entry(hw_copy / WORKSTATION, "a4000", 'aliases: ["rtx-a4000"', 'aliases: ["RTX 4090", "rtx-a4000"')
    problems = validate_paths([hw_copy])
    assert any("'RTX 4090' also names rtx-4090" in p.message for p in problems), problems


def test_missing_source_in_system_tables(hw_copy: Path) -> None:
    path = hw_copy / "storage.yaml"
    text = path.read_text(encoding="utf-8")
    path.write_text(text.replace('    source: "https://www.tomshardware.com', '    # source: "x', 1), encoding="utf-8")
    problems = validate_paths([path])
    assert [str(p) for p in problems if p.field == "sata-ssd.source"]


def test_bad_pcie_and_memory_tables(hw_copy: Path) -> None:
    ic = hw_copy / "interconnects.yaml"
    ic.write_text(ic.read_text().replace("per_direction_gbps: 31.51", "per_direction_gbps: 315.1", 1))
    mem = hw_copy / "memory.yaml"
    mem.write_text(mem.read_text().replace("per_channel_gbps: 25.6", "per_channel_gbps: 2.56", 1))
    fields = {p.field for p in validate_paths([hw_copy])}
    assert {"pcie-4-x16.per_direction_gbps", "ddr4-3200.per_channel_gbps"} <= fields


def test_unknown_top_level_and_malformed_yaml(tmp_path: Path) -> None:
    (tmp_path / "what.yaml").write_text("gpu:\n  - id: x\n", encoding="utf-8")
    (tmp_path / "broken.yaml").write_text("gpus:\n  - id: [unclosed\n", encoding="utf-8")
    problems = validate_paths([tmp_path])
    messages = {p.file.name: str(p) for p in problems}
    assert "cannot tell what this file is" in messages["what.yaml"]
    assert "malformed YAML" in messages["broken.yaml"] and re.search(r"broken\.yaml:\d+:", messages["broken.yaml"])
    assert validate_paths([tmp_path / "nope.yaml"])[0].message == "not found"


# --- model_db ---------------------------------------------------------------------------------


@pytest.fixture()
def model_copy(tmp_path: Path) -> Path:
    target = tmp_path / "model_db"
    shutil.copytree(packaged_dir("model_db"), target)
    return target


def test_model_db_copy_passes(model_copy: Path) -> None:
    assert validate_paths([model_copy]) == []


def test_model_duplicate_id_and_file_name(model_copy: Path) -> None:
    shutil.copy(model_copy / "gemma-2-9b.yaml", model_copy / "gemma-2-9b-copy.yaml")
    problems = validate_paths([model_copy])
    assert any("duplicate id 'gemma-2-9b'" in p.message for p in problems)
    assert any("differs from the file name gemma-2-9b-copy.yaml" in p.message for p in problems)


def test_model_bad_layer_types_and_key(model_copy: Path) -> None:
    path = model_copy / "gemma-3-1b.yaml"
    text = path.read_text(encoding="utf-8")
    assert "num_hidden_layers: 26" in text
    text = text.replace("num_hidden_layers: 26", "num_hidden_layers: 27")
    text = text.replace("\nlicense:", "\nlicence: x\nlicense:")
    path.write_text(text, encoding="utf-8")
    problems = [str(p) for p in validate_paths([path])]
    assert any(re.search(r"gemma-3-1b\.yaml:\d+: config\.layer_types: has 26 entries for 27 layers", p)
               for p in problems), problems
    assert any(re.search(r"gemma-3-1b\.yaml:\d+: licence: unknown key 'licence'", p) for p in problems), problems


def _edit_model(path: Path, old: str, new: str) -> None:
    text = path.read_text(encoding="utf-8")
    assert text.count(old) == 1, old
    path.write_text(text.replace(old, new), encoding="utf-8")


def test_ten_times_hidden_size_is_caught_by_the_parameter_count(tmp_path: Path) -> None:
    """The entry publishes 1 B parameters; a 10x hidden_size gives 10 B: the command names the field and line."""
    path = tmp_path / "gemma-3-1b.yaml"
    shutil.copy(packaged_dir("model_db") / "gemma-3-1b.yaml", path)
    _edit_model(path, "\n  hidden_size: 1152\n", "\n  hidden_size: 11520\n")
    proc = subprocess.run([sys.executable, "-c", "from gemma_fit.cli.entry import main; main()", "db", "validate",
                           str(tmp_path)], capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode != 0
    lines = [line for line in proc.stdout.splitlines() if "config.hidden_size" in line]
    assert len(lines) == 1 and PROBLEM_LINE.match(lines[0]), proc.stdout
    assert "11520 looks wrong" in lines[0] and "1,000,000,000" in lines[0]
    assert "hidden_size 1152 would match" in lines[0]
    line_no = int(lines[0].split(":")[1])
    assert path.read_text(encoding="utf-8").splitlines()[line_no - 1].strip() == "hidden_size: 11520"


@pytest.mark.parametrize(
    ("model_id", "old", "new", "field", "on_line"),
    [
        ("gemma-4-26B-A4B", "moe_intermediate_size: 704", "moe_intermediate_size: 7040",
         "config.moe_intermediate_size", "moe_intermediate_size: 7040"),
        ("gemma-2-9b", "vocab_size: 256000", "vocab_size: 25600", "config.vocab_size", "vocab_size: 25600"),
        ("gemma-2-9b", "published: 9242164736", "published: 9942164736", "params.published", "published:"),
        ("gemma-2-9b", "published: 9242164736", "published: 924216473", "config.hidden_size",
         "hidden_size: 3584"),  # the one field that would match is named; the message says both
        ("gemma-3-27b", "intermediate_size: 21504", "intermediate_size: 25504", "params.published", "published:"),
    ],
)
def test_parameter_count_mismatch_is_named(model_copy: Path, model_id: str, old: str, new: str, field: str,
                                           on_line: str) -> None:
    path = model_copy / f"{model_id}.yaml"
    _edit_model(path, old, new)
    mine = [p for p in validate_paths([path]) if p.field == field]
    assert mine and "params.published is" in mine[0].message, validate_paths([path])
    assert on_line in line_text(mine[0])
    if "924216473" in new:
        assert "or params.published is off by 10x" in mine[0].message


@pytest.mark.parametrize(
    ("old", "new", "field", "message"),
    [
        ("num_key_value_heads: 4", "num_key_value_heads: 3", "config.num_key_value_heads",
         "3 must divide num_attention_heads 8"),
        ("num_hidden_layers: 34", "num_hidden_layers: 100000", "config.num_hidden_layers", "1024 layers is gemma-fit"),
        ("hidden_size: 2560", "hidden_size: '2560'", "config.hidden_size", "valid integer, got '2560' (str)"),
        ("rope_theta: 1000000.0", "rope_theta: .nan", "config.rope_theta", "finite"),
        ("rope_scaling: {rope_type: linear, factor: 8.0}", "rope_scaling: {rope_type: linear, factor: .inf}",
         "config.rope_scaling.factor", "inf is not a finite number"),
    ],
)
def test_model_config_values_are_checked(model_copy: Path, old: str, new: str, field: str, message: str) -> None:
    path = model_copy / "gemma-3-4b.yaml"
    _edit_model(path, old, new)
    mine = [p for p in validate_paths([path]) if p.field == field]
    assert mine and message in mine[0].message, validate_paths([path])
    assert field.split(".")[-1] in line_text(mine[0])


# --- machine files and the command ------------------------------------------------------------


def test_machine_file_checks(tmp_path: Path) -> None:
    path = tmp_path / "box.yaml"
    path.write_text("name: box\ngpus: [a4000, rtx-9999]\ndisk: tape\nram_gb: 64\n", encoding="utf-8")
    problems = [str(p) for p in validate_paths([path])]
    assert any("box.yaml:2: gpus[1]: unknown GPU 'rtx-9999'" in p for p in problems), problems
    assert any("box.yaml:3: disk: unknown storage class 'tape'" in p for p in problems), problems
    path.write_text("name: box\ngpus: [a4000]\ndisk: nvme-gen4\n", encoding="utf-8")
    assert validate_paths([path]) == []


def _app() -> typer.Typer:
    app = typer.Typer()
    app.add_typer(db_app, name="db")
    app.command("noop")(lambda: None)
    return app


def test_validate_command(hw_copy: Path) -> None:
    runner = CliRunner()
    ok = runner.invoke(_app(), ["db", "validate"])
    assert ok.exit_code == 0, ok.output
    assert ok.stdout.strip().count("\n") == 0 and "ok" in ok.stdout
    edit_entry(hw_copy / WORKSTATION, "a4000", "memory_bandwidth_gbps: 448", "memory_bandwidth_gbps: 4480")
    edit_entry(hw_copy / WORKSTATION, "a6000", "tdp_w: 300", "tdp_w: 30000")
    bad = runner.invoke(_app(), ["db", "validate", str(hw_copy)])
    assert bad.exit_code == 1
    lines = bad.stdout.strip().splitlines()
    assert len(lines) == 2 and all(PROBLEM_LINE.match(line) for line in lines), bad.stdout
    assert "a4000.memory_bandwidth_gbps" in bad.stdout and "a6000.tdp_w" in bad.stdout
