"""The synthetic generator: deterministic for a seed, valid, and skewed like real data."""

import hashlib
import json
import subprocess
import sys
from collections import Counter

import zstandard

from conftest import DEMO, ROOT, records


def synth(out, *args):
    result = subprocess.run(
        [sys.executable, "-m", "docsrv", "snapshot", "synth", "--out", str(out), *args],
        capture_output=True, text=True, cwd=ROOT, timeout=300,
    )
    assert result.returncode == 0, result.stderr
    return result


def digest(directory):
    """The digest of each file of a snapshot (not the records a load keeps beside them: .docsrv-*)."""
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(directory.iterdir()) if p.is_file() and not p.name.startswith(".")}


def test_small_scale_is_deterministic_valid_and_skewed_and_another_seed_gives_another(tmp_path):
    synth(tmp_path / "a", "--scale", "small", "--seed", "3")
    synth(tmp_path / "b", "--scale", "small", "--seed", "3")
    assert digest(tmp_path / "a") == digest(tmp_path / "b")
    synth(tmp_path / "c", "--scale", "small", "--seed", "2", "--compress", "zst")
    other = zstandard.ZstdDecompressor().decompress((tmp_path / "c" / "projects.jsonl.zst").read_bytes(), max_output_size=1 << 30)
    assert other != (tmp_path / "a" / "projects.jsonl").read_bytes()
    validate = subprocess.run([sys.executable, "-m", "docsrv", "snapshot", "validate", str(tmp_path / "a")],
                              capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert validate.returncode == 0, validate.stderr

    snapshot = tmp_path / "a"
    versions = records("versions", snapshot)
    builds = records("builds", snapshot)
    assert len(records("projects", snapshot)) == 1000 and len(versions) == 10_000
    assert len(builds) == 50_000 and len(records("pages", snapshot)) == 20_000
    per_build = Counter(c["build"] for c in records("build_commands", snapshot))
    assert set(per_build.values()) <= {3, 4, 5, 6} and len(per_build) == 50_000
    # A few projects own most versions and builds: the top 5 % own more than half.
    for items in (versions, builds):
        owners = Counter(item["project"] for item in items).most_common()
        top = sum(n for _, n in owners[:50])
        assert top > len(items) / 2
    # Pages record their Sphinx document name: the path without the html builder's suffix.
    assert all(page["document"] + ".html" == page["path"] for page in records("pages", snapshot))
    years = Counter(b["date"][:4] for b in builds)
    assert len(years) >= 5 and years["2026"] > years["2019"]


def test_demo_scale_is_the_bundled_snapshot_sealed_by_its_manifest(tmp_path):
    synth(tmp_path / "demo", "--scale", "demo")
    copied, bundled = digest(tmp_path / "demo"), digest(DEMO)
    assert {name: d for name, d in copied.items() if name != "manifest.json"} == \
        {name: d for name, d in bundled.items() if name != "manifest.json"}
    manifest = json.loads((tmp_path / "demo" / "manifest.json").read_text())
    files = manifest.pop("files")
    assert manifest == json.loads((DEMO / "manifest.json").read_text())
    assert files == {name: {"size": (DEMO / name).stat().st_size, "sha256": d} for name, d in bundled.items() if name != "manifest.json"}


def test_an_existing_out_is_refused_unless_forced_and_replaced_whole(tmp_path):
    out = tmp_path / "snap"
    synth(out, "--scale", "demo")
    (out / "stray.txt").write_text("from before")
    again = subprocess.run([sys.executable, "-m", "docsrv", "snapshot", "synth", "--out", str(out), "--scale", "demo"],
                           capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert again.returncode == 1 and again.stderr.strip() == f"docsrv: {out} already exists: choose another directory, or --force to replace it"
    assert (out / "stray.txt").exists()
    synth(out, "--scale", "demo", "--force")
    assert not (out / "stray.txt").exists() and (out / "manifest.json").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["snap"]  # nothing left beside it
