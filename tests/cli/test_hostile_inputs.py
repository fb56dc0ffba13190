"""Hostile inputs through the real `allennlp` CLI: the refusals of docs/security.md that our
subcommands meet, and hostile archives and output paths. A refusal exits non-zero with one
`allennlp CMD: error: ...` line naming the file, line, path or member, no Python traceback, and
nothing written anywhere under the test's root folder; a counted skip exits 0 and says what it
skipped. (`allennlp train` is allennlp's own command: its errors keep allennlp's traceback.)"""

import bz2
import gzip
import io
import json
import lzma
import os
import shutil
import tarfile
import tempfile
from pathlib import Path

import h5py
import numpy
import pytest
import torch

from elmo_plugin.commands.elmo_export import export_archive
from tests.helpers import (
    CONFIG_DIR,
    REPO_ROOT,
    TINY_LSTM_OVERRIDES,
    TINY_TAGGER_OVERRIDES,
    conllu_head,
    copy_archive_with,
    damaged_archive,
    run_allennlp,
    run_allennlp_in_process,
    tar_member,
    train_args,
)

BILM = REPO_ROOT / "fixtures" / "archives_before_layering" / "bilm_lstm.tar.gz"
TAGGER = REPO_ROOT / "fixtures" / "archives_before_layering" / "tagger.tar.gz"
LSTM_CELL = "RNN_0/RNN/MultiRNNCell/Cell0/LSTMCell"


def listing(root: Path) -> set:
    return {str(path.relative_to(root)) for path in root.rglob("*")}


@pytest.fixture
def root(plugin_cwd) -> Path:
    (plugin_cwd / "in.txt").write_text(
        "the file is open .\n\nreturn the value .\n", encoding="utf-8"
    )
    return plugin_cwd


def refused(args, root: Path, *named: str) -> str:
    """Runs the CLI (a process of its own) expecting a refusal; returns its output."""
    before = listing(root)
    result = run_allennlp(args, cwd=root, check=False)
    output = result.stdout + result.stderr
    assert result.returncode == 1, output[-3000:]
    assert "Traceback" not in output
    errors = [line for line in output.splitlines() if ": error: " in line]
    assert len(errors) == 1, output[-3000:]
    assert all(name in errors[0] for name in named), (errors[0], named)
    assert listing(root) == before
    return output


def succeeded(args, root: Path, *new_paths: str) -> str:
    """Runs the CLI (in this process) expecting success that writes exactly `new_paths`; returns
    stdout + stderr."""
    before = listing(root)
    result = run_allennlp_in_process(args, cwd=root)
    assert "Traceback" not in result.stderr
    assert listing(root) - before == set(new_paths)
    return result.stdout + result.stderr


def hostile_archive(root: Path, kind: str) -> Path:
    """Our biLM archive plus one member that would write (or point) outside the extraction
    folder."""
    members = {
        "dotdot": [tar_member("../" * 30 + str(root / "escaped").lstrip("/"), size=5)],
        "absolute": [tar_member(str(root / "absolute"), size=5)],
        "symlink": [tar_member("vocabulary/evil", tarfile.SYMTYPE, linkname=str(root))],
        "hardlink": [tar_member("evil", tarfile.LNKTYPE, linkname="/etc/passwd")],
        "fifo": [tar_member("evil", tarfile.FIFOTYPE)],
        "device": [tar_member("evil", tarfile.CHRTYPE)],
    }
    return copy_archive_with(BILM, root / f"{kind}.tar.gz", extra=members[kind])


@pytest.mark.parametrize(
    "command, kind",
    [
        ("elmo-embed", "dotdot"),
        ("elmo-embed", "absolute"),
        ("elmo-embed", "symlink"),
        ("elmo-export", "dotdot"),
        ("elmo-export", "hardlink"),
        ("elmo-export", "device"),
        ("elmo-embed", "fifo"),
    ],
)
def test_an_archive_with_a_hostile_member_is_refused_before_extraction(root, command, kind):
    archive = hostile_archive(root, kind)
    with tarfile.open(archive) as opened:
        member = opened.getmembers()[-1].name
    outputs = ["in.txt", "out.hdf5"] if command == "elmo-embed" else ["elmo"]
    line = refused([command, str(archive), *outputs], root, str(archive), repr(member))
    assert "refusing to extract member" in line


def bad_archive(root: Path, kind: str) -> Path:
    """Our biLM archive with a hostile member, damaged, or without its weights."""
    if kind == "truncated":
        return damaged_archive(BILM, root / "truncated.tar.gz", "truncated")
    if kind == "no weights":
        return copy_archive_with(BILM, root / "no_weights.tar.gz", drop="weights.th")
    return hostile_archive(root, kind)


@pytest.mark.parametrize("command", ["predict", "evaluate"])
@pytest.mark.parametrize(
    "kind, named",
    [
        ("absolute", "refusing to extract member '/"),
        ("dotdot", "refusing to extract member '../"),
        ("truncated", "damaged model archive, unreadable from member 'weights.th'"),
        ("no weights", "no model weights (weights.th or best.th) in the archive"),
    ],
)
def test_allennlp_predict_and_evaluate_refuse_a_bad_archive_and_leave_no_extracted_folder(
    root, monkeypatch, command, kind, named
):
    """allennlp's own `load_archive` extracts through our checks: allennlp's traceback, its last
    line naming the archive (and the member), nothing extracted anywhere, and no folder left in
    the temporary folder (allennlp's own extraction leaves its folder there when it fails)."""
    temporary = root / "tmp"
    temporary.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", tempfile.gettempdir())  # this process's, as it was
    monkeypatch.setenv("TMPDIR", str(temporary))  # the forked command's tempfile reads it
    (root / "in.jsonl").write_text('{"sentence": "the file is open ."}\n', encoding="utf-8")
    archive = bad_archive(root, kind)
    before = listing(root)
    args = [command, str(archive), "in.txt", "--output-file", "out.json"]
    if command == "predict":
        args[2:3] = ["in.jsonl", "--predictor", "elmo_embeddings", "--silent"]
    result = run_allennlp(args, cwd=root, check=False)
    assert result.returncode == 1, result.stderr[-3000:]
    assert listing(root) == before
    last = result.stderr.strip().splitlines()[-1]
    assert f"{archive}: {named}" in last, last


def test_the_embedders_pretrained_file_refuses_a_hostile_archive_in_allennlp_train(
    root, tiny_tagged_data
):
    archive = hostile_archive(root, "dotdot")
    values = dict(
        TINY_TAGGER_OVERRIDES,
        train_data_path=str(tiny_tagged_data / "train.conllu"),
        validation_data_path=str(tiny_tagged_data / "valid.conllu"),
        **{"model.text_field_embedder.token_embedders.elmo.pretrained_file": str(archive)},
    )
    before = listing(root)
    config = CONFIG_DIR / "pos_tagger_elmo.jsonnet"
    result = run_allennlp(train_args(config, root / "run", values), cwd=root, check=False)
    assert result.returncode != 0
    last = result.stderr.strip().splitlines()[-1]  # allennlp's traceback ends with our error line
    assert "UnsafeArchiveError" in last and str(archive) in last and "escaped" in last
    assert not {path for path in listing(root) - before if not path.startswith("run")}


@pytest.mark.parametrize(
    "drop, message", [("config.json", "no config.json"), ("weights.th", "no model weights")]
)
def test_an_archive_without_config_or_weights_is_an_error_naming_it(root, drop, message):
    archive = copy_archive_with(BILM, root / "incomplete.tar.gz", drop=drop)
    refused(["elmo-export", str(archive), "elmo"], root, str(archive), message)


@pytest.mark.parametrize(
    "damage, where",
    [
        ("bytes at 30%", "'weights.th' on (CRC"),
        ("header of vocabulary/tokens.txt", "damaged member"),
    ],
)
def test_a_damaged_archive_is_one_line_naming_it_and_where_it_breaks(root, damage, where):
    archive = damaged_archive(BILM, root / "damaged.tar.gz", damage)
    refused(
        ["elmo-export", str(archive), "elmo"], root, str(archive), "damaged model archive", where
    )


def test_an_archive_that_holds_no_bilm_says_what_it_holds(root):
    refused(
        ["elmo-embed", str(TAGGER), "in.txt", "out.hdf5"],
        root,
        str(TAGGER),
        "holds a 'crf_tagger' model",
    )


class RunsCode:
    """Pickled as a call of `print`: what a weights file that runs code holds."""

    def __reduce__(self):
        return (print, ("this ran",))


def test_weights_that_would_run_code_are_refused_without_torchs_advice_to_load_them_anyway(root):
    weights = io.BytesIO()
    torch.save({"weight": RunsCode()}, weights)
    archive = root / "runs_code.tar.gz"
    with tarfile.open(BILM) as original, tarfile.open(archive, "w:gz") as copy:
        for member in original.getmembers():
            data = original.extractfile(member) if member.isfile() else None
            if member.name == "weights.th":
                member.size, data = len(weights.getvalue()), io.BytesIO(weights.getvalue())
            copy.addfile(member, data)
    output = refused(["elmo-export", str(archive), "elmo"], root, str(archive))
    line = next(line for line in output.splitlines() if ": error: " in line)
    assert line == (
        f"allennlp elmo-export: error: {archive}: cannot load the model: its weights are not "
        "plain tensors (Unsupported global: GLOBAL print was not an allowed global by default): "
        "a pickle that could run code when loaded, refused; load only weights you trust"
    )
    assert "this ran" not in output


@pytest.mark.parametrize(
    "args, named",
    [
        (["elmo-embed", str(BILM), "in.txt", "missing/out.hdf5"], "missing/out.hdf5"),
        # unwritable, even for root
        (["elmo-embed", str(BILM), "in.txt", "/sys/out.hdf5"], "/sys/out.hdf5"),
        (["elmo-export", str(BILM), "missing/elmo"], "missing/elmo"),
        # before the corpus
        (["elmo-vocab", "nothing/*.txt", "missing/tokens.txt"], "missing/tokens.txt"),
        (["elmo-vocab", "in.txt", "."], "it is a folder"),
        # a file name ending with / (a folder that does not exist)
        (["elmo-embed", str(BILM), "in.txt", "new/"], "cannot write new/: it names a folder"),
        (["elmo-vocab", "in.txt", "new/"], "cannot write new/: it names a folder"),
        # a link to nothing
        (["elmo-export", str(BILM), "dangling"], "cannot write to dangling: it is a link to"),
    ],
)
def test_a_missing_or_unwritable_output_folder_is_an_error_before_any_work(root, args, named):
    if named.startswith("/sys") and not os.path.isdir("/sys"):
        pytest.skip("no /sys: no folder nobody can write")
    os.symlink("nowhere", root / "dangling")
    assert "loading archive" not in refused(args, root, named)


def test_corpus_that_matches_nothing_has_no_tokens_or_is_not_text_is_an_error_naming_it(root):
    refused(["elmo-vocab", "corpus/*.txt", "tokens.txt"], root, "corpus/*.txt")
    (root / "blank.txt").write_text("\n   \n\n", encoding="utf-8")
    refused(["elmo-vocab", "blank.txt", "tokens.txt"], root, "no tokens at all", "blank.txt")
    (root / "binary.txt").write_bytes(gzip.compress(os.urandom(4000)))
    refused(["elmo-vocab", "in.txt", "binary.txt", "tokens.txt"], root, "binary.txt", "is not text")


def test_training_or_evaluating_on_a_corpus_without_text_is_an_error_naming_it(
    root, tiny_corpus, tiny_bilm_archive
):
    """allennlp's own commands keep its traceback; its last line is ours, and no archive is
    written for a run that trained on nothing."""
    (root / "blank.txt").write_text("\n  \n= Heading =\n\n", encoding="utf-8")
    values = dict(
        TINY_LSTM_OVERRIDES,
        train_data_path="blank.txt",
        validation_data_path=str(tiny_corpus / "valid.txt"),
    )
    train = train_args(CONFIG_DIR / "elmo_lstm.jsonnet", "run", values)
    for args in (train, ["evaluate", str(tiny_bilm_archive), "blank.txt"]):
        result = run_allennlp(args, cwd=root, check=False)
        assert result.returncode != 0
        last = result.stderr.strip().splitlines()[-1]
        assert "no tokens at all in 'blank.txt'" in last and "3 blank lines" in last, last
    assert not (root / "run" / "model.tar.gz").exists()


@pytest.mark.parametrize(
    "damage, named",
    [
        (gzip.compress, "conllu_tagging: dev.conllu is not text"),
        (lambda text: text.replace(b"\tmatch\tmatch\t", b"\tmatch\t", 1), "dev.conllu:4: "),
    ],
    ids=["gzip", "missing-column"],
)
def test_evaluating_on_a_damaged_conllu_file_is_an_error_naming_it(root, damage, named):
    (root / "dev.conllu").write_bytes(
        damage((REPO_ROOT / "fixtures/tagged/valid.conllu").read_bytes())
    )
    result = run_allennlp(["evaluate", str(TAGGER), "dev.conllu"], cwd=root, check=False)
    assert result.returncode != 0
    last = result.stderr.strip().splitlines()[-1]
    assert named in last, last


def test_training_with_a_tokens_file_that_is_not_utf8_is_an_error_naming_its_line(
    root, tiny_corpus
):
    (root / "tokens.txt").write_bytes("<S>\n</S>\n@@UNKNOWN@@\ncaf\u00e9\n".encode("latin-1"))
    values = dict(
        TINY_LSTM_OVERRIDES,
        train_data_path=str(tiny_corpus / "train" / "*.txt"),
        validation_data_path=str(tiny_corpus / "valid.txt"),
        vocabulary={"type": "elmo_tokens_file", "tokens_file": "tokens.txt"},
    )
    train = train_args(CONFIG_DIR / "elmo_lstm.jsonnet", "run", values)
    result = run_allennlp(train, cwd=root, check=False)
    assert result.returncode != 0
    last = result.stderr.strip().splitlines()[-1]
    assert "tokens.txt:4: not UTF-8" in last, last


def test_skipped_lines_are_counted_and_compressed_shards_read(root):
    shards = root / "shards"
    shards.mkdir()
    (shards / "0.txt").write_bytes(b"= Heading =\nalpha beta\n\n  \ngamma \xff delta\n")
    (shards / "1.txt").write_bytes(b"")
    (shards / "2.txt.gz").write_bytes(gzip.compress(b"gz1 gz2\n"))
    (shards / "3.txt.bz2").write_bytes(bz2.compress(b"bz1\n"))
    (shards / "4.txt.xz").write_bytes(lzma.compress(b"xz1\n"))
    log = succeeded(["elmo-vocab", "shards/*", "tokens.txt", "--skip-headings"], root, "tokens.txt")
    assert (
        "5 text lines from 5 files; skipped 1 empty files, 2 blank lines, 1 heading lines; "
        "1 lines had invalid UTF-8" in log
    )
    assert "invalid UTF-8 at shards/0.txt:5" in log
    tokens = (root / "tokens.txt").read_text(encoding="utf-8").split("\n")
    assert {"alpha", "\ufffd", "gz1", "gz2", "bz1", "xz1"} <= set(tokens)
    assert "Heading" not in tokens


def test_nul_bytes_inside_tokens_are_replaced_and_counted_in_the_vocabulary(root):
    (root / "nul.txt").write_bytes(b"alpha be\0ta\ngamma\n\0\n")
    log = succeeded(["elmo-vocab", "nul.txt", "tokens.txt"], root, "tokens.txt")
    assert "2 lines had NUL bytes (replaced too)" in log
    tokens = (root / "tokens.txt").read_text(encoding="utf-8").split("\n")
    assert {"alpha", "be\ufffdta", "gamma", "\ufffd"} <= set(tokens)
    assert not any("\0" in token for token in tokens)


def test_embed_input_missing_is_named_and_bad_bytes_and_long_tokens_are_repaired(root):
    refused(
        ["elmo-embed", str(BILM), "nope.txt", "out.hdf5"], root, "input file not found: nope.txt"
    )
    (root / "bad.txt").write_bytes(b"fine line\ncaf\xc3 " + b"x" * 5000 + b"\n")
    log = succeeded(
        ["elmo-embed", str(BILM), "bad.txt", "out.hdf5", "--layers", "top"], root, "out.hdf5"
    )
    assert "invalid UTF-8 at bad.txt:2" in log
    with h5py.File(root / "out.hdf5", "r") as vectors:
        assert vectors["1"].shape == (2, 32)


@pytest.fixture(scope="module")
def elmo_folder(tmp_path_factory) -> Path:
    """options.json + weights.hdf5 (+ vocab, softmax) of the tiny biLM."""
    folder = tmp_path_factory.mktemp("hostile") / "elmo"
    export_archive(str(BILM), str(folder))
    return folder


def damage_options(folder: Path) -> str:
    options = json.loads((folder / "options.json").read_text())
    options["lstm"]["dim"] = 48
    (folder / "options.json").write_text(json.dumps(options))
    return f"dataset {LSTM_CELL}/W_0 has shape (32, 128) but"


def damage_nan(folder: Path) -> str:
    with h5py.File(folder / "weights.hdf5", "a") as weights:
        weights["CNN_proj/b_proj"][0] = numpy.nan
    return "dataset CNN_proj/b_proj holds 1 NaN or inf values"


def damage_truncate(folder: Path) -> str:
    path = folder / "weights.hdf5"
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    return "(truncated or corrupt file?)"


@pytest.mark.parametrize("damage", [damage_options, damage_nan, damage_truncate])
def test_damaged_elmo_files_are_an_error_naming_file_and_dataset(root, elmo_folder, damage):
    folder = root / "elmo"
    shutil.copytree(elmo_folder, folder)
    message = damage(folder)
    refused(
        ["elmo-embed", str(folder), "in.txt", "out.hdf5"],
        root,
        str(folder / "weights.hdf5"),
        message,
    )


def test_elmo_export_writes_exactly_its_four_files(root):
    written = [
        "elmo",
        "elmo/options.json",
        "elmo/weights.hdf5",
        "elmo/vocab.txt",
        "elmo/softmax.hdf5",
    ]
    succeeded(["elmo-export", str(BILM), "elmo"], root, *written)  # no temporary file left behind


@pytest.mark.parametrize("umask", [0o022, 0o027])
def test_every_output_gets_the_mode_a_plain_open_gives_under_the_umask(root, umask):
    previous = os.umask(umask)
    try:
        (root / "plain").write_text("")  # what any other program's output gets here
        succeeded(["elmo-vocab", "in.txt", "tokens.txt"], root, "tokens.txt")
        run_allennlp_in_process(["elmo-export", str(BILM), "elmo"], cwd=root)
    finally:
        os.umask(previous)
    plain = (root / "plain").stat().st_mode
    assert plain & 0o777 == 0o666 & ~umask
    written = [
        "tokens.txt",
        *(f"elmo/{name}" for name in ("options.json", "weights.hdf5", "vocab.txt", "softmax.hdf5")),
    ]
    assert {name: (root / name).stat().st_mode for name in written} == dict.fromkeys(written, plain)


def test_a_cuda_device_this_machine_lacks_is_one_line_before_the_model_loads(root):
    output = refused(
        ["elmo-embed", str(BILM), "in.txt", "out.hdf5", "--cuda-device", "99"],
        root,
        "error: --cuda-device 99: torch sees",
        "--cuda-device -1 runs on the CPU",
    )
    assert "loading archive" not in output


@pytest.mark.parametrize(
    "already, named",
    [
        (["x_options.json", "x_weights.hdf5"], "x_options.json, x_weights.hdf5"),
        (["my_vocab.txt"], "my_vocab.txt"),
        (["config.json", "weights.th"], "config.json"),  # a model archive folder
    ],
)
def test_elmo_export_refuses_a_folder_holding_another_elmo_before_writing(root, already, named):
    (root / "elmo").mkdir()
    for name in already:
        (root / "elmo" / name).write_text("{}")
    output = refused(["elmo-export", str(BILM), "elmo"], root, f"elmo already holds {named}")
    assert "loading archive" not in output


def test_elmo_export_over_an_earlier_export_replaces_its_four_files(root):
    run_allennlp_in_process(["elmo-export", str(BILM), "elmo"], cwd=root)
    first = {path.name: path.read_bytes() for path in (root / "elmo").iterdir()}
    (root / "elmo" / "options.json").write_text("{}")  # damaged: replaced by the new export
    succeeded(["elmo-export", str(BILM), "elmo"], root)
    assert {path.name: path.read_bytes() for path in (root / "elmo").iterdir()} == first


@pytest.mark.parametrize(
    "planted, named",
    [("softmax.hdf5", "it is a device, pipe or socket"), ("vocab.txt", "it is a folder")],
)
def test_elmo_export_over_an_earlier_export_refuses_a_bad_name_before_touching_it(
    root, planted, named
):
    """A link to a device or a folder at one of the four names: refused before the model loads,
    the earlier export whole."""
    run_allennlp_in_process(["elmo-export", str(BILM), "elmo"], cwd=root)
    (root / "elmo" / planted).unlink()
    if planted == "vocab.txt":
        (root / "elmo" / planted).mkdir()
    else:
        os.symlink("/dev/null", root / "elmo" / planted)
    before = sorted(os.listdir(root / "elmo"))
    output = refused(
        ["elmo-export", str(BILM), "elmo"], root, f"cannot write elmo/{planted}: {named}"
    )
    assert "loading archive" not in output and sorted(os.listdir(root / "elmo")) == before


def test_invalid_utf8_in_a_conllu_file_is_replaced_and_counted_by_allennlp_evaluate(root):
    text = conllu_head(REPO_ROOT / "fixtures" / "tagged" / "valid.conllu", 8).encode("utf-8")
    (root / "dev.conllu").write_bytes(text.replace(b"\tmatch\t", b"\tm\xe4tch\t", 1))
    args = ["evaluate", str(TAGGER), "dev.conllu", "--output-file", "metrics.json"]
    log = succeeded(args, root, "metrics.json")
    assert "invalid UTF-8 at dev.conllu:4, replaced" in log
    assert "conllu_tagging: 1 lines of dev.conllu had invalid UTF-8 (replaced with U+FFFD)" in log
    assert 0 < json.loads((root / "metrics.json").read_text())["accuracy"] <= 1
