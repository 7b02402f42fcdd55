"""Synthetic snapshots at four scales, deterministic for a seed, with the skew of real data.

A few projects own most versions and builds (a Zipf-like popularity), builds spread over
several years with the recent ones denser, and pages are written from a technical
vocabulary with the same kind of skew, so that search has real work to do. ``demo`` is the
hand-curated snapshot bundled with docsrv, copied as it is.
"""

from __future__ import annotations

import itertools
import random
import shutil
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TypeVar

from ..utils.progress import progress_bar, wanted
from .load import manifest_of
from .records import (
    FORMAT,
    FORMAT_VERSION,
    KINDS,
    Build,
    BuildCommand,
    BuildState,
    DownloadFormat,
    Manifest,
    Page,
    Project,
    ProjectRelationship,
    Section,
    User,
    Version,
)
from .write import RecordWriter, built_aside, write_manifest

T = TypeVar("T")
DEMO = Path(__file__).resolve().parent.parent.parent / "snapshots" / "demo"

#: projects, versions, builds, pages
SCALES = {
    "small": (1_000, 10_000, 50_000, 20_000),
    "medium": (10_000, 100_000, 500_000, 200_000),
    "large": (100_000, 1_000_000, 2_000_000, 1_000_000),
}

WORDS = """
api app application argument array async attribute authentication backend batch binary buffer build bundle
cache callback channel class client cluster command compile compiler component concurrency config configuration
connection container context coroutine credential cursor daemon dashboard data database dataclass debug decorator
default dependency deploy deployment descriptor dictionary directive directory docker document documentation driver
encoding endpoint engine environment error event exception executor export extension field file filter fixture
format framework function gateway generator graph handler hash header hook host http import index inheritance
install installation instance integer interface iterator job json kernel key keyword lambda layer layout library
lifecycle link list listener load lock log logger loop manifest mapping markdown memory message metadata method
middleware migration mock model module mutex namespace network node object option package pagination parameter
parser patch path performance pipeline plugin pointer policy pool port process profile project property protocol
proxy query queue record redirect reference regex registry release render replica repository request resolver
resource response result retry route router runtime sandbox schema scope script search secret serializer server
service session setting shell signal snapshot socket source specification sphinx stack state static storage stream
string struct subprocess suite syntax table task template tenant test thread timeout token toolchain trace
transaction transport tuple type unicode upload url user validation value variable vector version virtualenv
volume webhook widget worker workflow wrapper yaml zip
the a of to and in is for that with as on by this be are from or an it can which when you your use uses using
returns return each all any new only more not must may should will if then than also into one two first
""".split()

SECTION_WORDS = [w for w in WORDS[:-60] if len(w) > 3]
LANGUAGES = ["en"] * 8 + ["es", "ja", "de", "fr", "zh-cn", "pt-br"]
PROGRAMMING = ["py"] * 10 + ["js", "go", "rust", "c", "cpp", "java", "ruby", "php", "words"]
DOC_TYPES = ["generator"] * 6 + ["generator_htmldir"] * 3 + ["mkdocs", "generator_singlehtml"]
STEPS = [
    ("git clone --no-single-branch --depth 50 {repo} .", "Cloning repository", "Cloning into '.'...\n"),
    ("git checkout --force {commit}", "Checking out commit", "HEAD is now at {short}\n"),
    ("python3 -m virtualenv $READTHEDOCS_VIRTUALENV_PATH", "Creating virtual environment", "created virtual environment\n"),
    ("python -m pip install --upgrade pip setuptools", "Upgrading pip", "Successfully installed pip-24.0\n"),
    ("python -m pip install -r docs/requirements.txt", "Installing requirements", "Successfully installed Sphinx-7.2.6\n"),
    ("python -m sphinx -T -b html -d _build/doctrees . $READTHEDOCS_OUTPUT/html", "Building HTML", "build succeeded.\n"),
]
EPOCH = datetime(2019, 1, 1, tzinfo=UTC)
SPAN_SECONDS = int((datetime(2026, 10, 1, tzinfo=UTC) - EPOCH).total_seconds())
CREATED_AT = datetime(2026, 10, 1, tzinfo=UTC)
BATCH = 50_000


def write_synthetic(
    out: str | Path, *, scale: str, seed: int = 1, compress: str = "none", progress: bool | None = None, replace: bool = False
) -> dict[str, int]:
    """Write a snapshot of ``scale`` to ``out`` (built aside, then renamed into place; an existing
    ``out`` only with ``replace``); return its counts."""
    with built_aside(Path(out), replace=replace) as partial:
        return write_into(partial, scale=scale, seed=seed, compress=compress, progress=wanted() if progress is None else progress)


def write_into(out: Path, *, scale: str, seed: int, compress: str, progress: bool) -> dict[str, int]:
    if scale == "demo":
        for path in DEMO.glob("*.jsonl"):
            shutil.copyfile(path, out / path.name)
        manifest = manifest_of(DEMO)
        write_manifest(out, manifest)
        return manifest.counts
    generator = Synthesizer(scale, seed)
    counts = {}
    for kind in KINDS:
        items = getattr(generator, kind)()
        expected = generator.expected(kind)
        with RecordWriter(out, kind, compress) as writer, progress_bar(expected, f"write {kind}", progress, unit="rec") as bar:
            for batch in chunked(items, BATCH):
                writer.write(batch)
                if bar is not None:
                    bar.update(len(batch))
            counts[kind] = writer.count
    manifest = Manifest(
        format=FORMAT,
        format_version=FORMAT_VERSION,
        name=f"synth-{scale}-{seed}",
        created_at=CREATED_AT,
        public_url="https://docs.example.org",
        counts=counts,
        description=f"Synthetic snapshot, scale {scale}, seed {seed}.",
    )
    write_manifest(out, manifest)
    return counts


def chunked(items: Iterable[T], size: int) -> Iterator[tuple[T, ...]]:
    iterator = iter(items)
    while batch := tuple(itertools.islice(iterator, size)):
        yield batch


class Synthesizer:
    """Generates each kind of record in turn; later kinds refer to what earlier ones made."""

    def __init__(self, scale: str, seed: int) -> None:
        self.scale = scale
        self.seed = seed
        self.rng = random.Random(seed)
        self.n_projects, self.n_versions, self.n_builds, self.n_pages = SCALES[scale]
        self.n_users = max(self.n_projects // 2, 10)
        rng = self.rng
        # Popularity: project i has weight 1 / (i + 1) ** 1.1, in a shuffled order of ids.
        ranks = list(range(self.n_projects))
        rng.shuffle(ranks)
        weights = [1.0 / (rank + 1) ** 1.1 for rank in ranks]
        total = sum(weights)
        self.cum_weights = list(itertools.accumulate(weights))
        spare = self.n_versions - self.n_projects
        shares = [int(spare * w / total) for w in weights]
        shares[ranks.index(0)] += spare - sum(shares)
        self.versions_per_project = [1 + s for s in shares]
        self.project_slugs: list[str] = []
        self.project_repos: list[str] = []
        self.versions_of: list[list[int]] = []
        self.version_slugs: list[str] = []
        self.version_project: list[int] = []
        self.n_commands = 0
        self.word_weights = list(itertools.accumulate(1.0 / (i + 1) ** 0.9 for i in range(len(WORDS))))

    def expected(self, kind: str) -> int | None:
        return {
            "users": self.n_users,
            "projects": self.n_projects,
            "versions": self.n_versions,
            "builds": self.n_builds,
            "pages": self.n_pages,
        }.get(kind)

    def users(self) -> Iterator[User]:
        rng = self.rng
        for uid in range(1, self.n_users + 1):
            first, second = rng.choice(SECTION_WORDS), rng.choice(SECTION_WORDS)
            name = f"{first}-{second}-{uid}"
            yield User(id=uid, username=name, email=f"{name}@mail.example.com", first_name=first.title(), last_name=second.title())

    def projects(self) -> Iterator[Project]:
        rng = self.rng
        used: set[str] = set()
        for index in range(self.n_projects):
            pid = index + 1
            slug = "-".join(rng.sample(SECTION_WORDS, 2))
            if slug in used:
                slug = f"{slug}-{pid}"
            used.add(slug)
            repo = f"https://git.example.com/{slug.split('-')[0]}/{slug}"
            self.project_slugs.append(slug)
            self.project_repos.append(repo)
            owners = tuple(sorted(rng.sample(range(1, self.n_users + 1), rng.choice((1, 1, 1, 2, 3)))))
            created = EPOCH + timedelta(seconds=rng.randrange(SPAN_SECONDS // 2))
            yield Project(
                id=pid,
                name=slug.replace("-", " ").title(),
                slug=slug,
                description=" ".join(self.words(rng.randint(6, 30))).capitalize() + ".",
                language=rng.choice(LANGUAGES),
                programming_language=rng.choice(PROGRAMMING),
                repo=repo,
                repo_type="git" if rng.random() < 0.95 else rng.choice(("hg", "svn", "bzr")),
                default_version="stable" if self.versions_per_project[index] > 2 else "latest",
                default_branch=rng.choice(("main", "main", "master", "develop")),
                documentation_type=rng.choice(DOC_TYPES),
                users=owners,
                privacy_level="private" if rng.random() < 0.02 else "public",
                project_url=f"https://{slug}.example.com/",
                crate_url=f"https://packages.example.com/project/{slug}/",
                copyright=f"{created.year}, the {slug} authors",
                theme=rng.choice(("default", "furo", "alabaster", "sphinx_rtd_theme", "material")),
                requirements_file="docs/requirements.txt" if rng.random() < 0.6 else "",
                use_virtualenv=rng.random() < 0.7,
                pub_date=created,
                modified_date=created + timedelta(seconds=rng.randrange(SPAN_SECONDS // 2)),
            )

    def relationships(self) -> Iterator[ProjectRelationship]:
        """Subprojects: one project in twenty is a parent of one to three others (which are
        neither parents nor another's subproject), drawn from a generator of their own so that
        every other kind of record is the same as without them."""
        rng = random.Random(f"{self.seed}-relationships")
        ids = list(range(1, self.n_projects + 1))
        rng.shuffle(ids)
        parents = ids[: self.n_projects // 20]
        children = iter(ids[self.n_projects // 20 :])
        rid = 0
        for parent in sorted(parents):
            for child in itertools.islice(children, rng.randint(1, 3)):
                rid += 1
                yield ProjectRelationship(id=rid, parent=parent, child=child, alias=self.project_slugs[child - 1].split("-")[-1])

    def versions(self) -> Iterator[Version]:
        rng = self.rng
        vid = 0
        for index, count in enumerate(self.versions_per_project):
            pid = index + 1
            ids: list[int] = []
            names = ["latest", "stable"][:count]
            major = rng.randint(0, 5)
            minor = patch = 0
            while len(names) < count:
                if rng.random() < 0.15:
                    major, minor, patch = major + 1, 0, 0
                elif rng.random() < 0.4:
                    minor, patch = minor + 1, 0
                else:
                    patch += 1
                names.append(f"{major}.{minor}.{patch}")
            for position, name in enumerate(names):
                vid += 1
                ids.append(vid)
                self.version_slugs.append(name)
                self.version_project.append(pid)
                is_tag = position >= 2
                formats: tuple[DownloadFormat, ...] = tuple(f for f in ("pdf", "htmlzip", "epub") if rng.random() < 0.3)
                yield Version(
                    id=vid,
                    project=pid,
                    slug=name,
                    verbose_name=name,
                    identifier=f"{rng.getrandbits(160):040x}" if is_tag else ("main" if name == "latest" else f"{major}.{minor}.{patch}"),
                    active=position < 2 or rng.random() < 0.5,
                    built=position < 2 or rng.random() < 0.8,
                    type="tag" if is_tag else "branch",
                    privacy_level="private" if rng.random() < 0.02 else "public",
                    downloads=formats,
                )
            self.versions_of.append(ids)

    def builds(self) -> Iterator[Build]:
        rng = self.rng
        projects = rng.choices(range(self.n_projects), cum_weights=self.cum_weights, k=self.n_builds)
        # Build ids follow time, as in the original service; newer builds are denser.
        offsets = sorted(int(SPAN_SECONDS * rng.random() ** 0.6) for _ in range(self.n_builds))
        self.build_starts: list[datetime] = []
        self.build_commits: list[str] = []
        self.build_projects: list[int] = []
        for bid, (index, offset) in enumerate(zip(projects, offsets, strict=True), start=1):
            ids = self.versions_of[index]
            vid = ids[0] if rng.random() < 0.5 or len(ids) == 1 else rng.choice(ids)
            date = EPOCH + timedelta(seconds=offset)
            commit = f"{rng.getrandbits(160):040x}"
            state: BuildState = "finished" if rng.random() < 0.97 else rng.choice(("triggered", "building", "installing", "cloning"))
            success = state == "finished" and rng.random() < 0.85
            self.build_starts.append(date)
            self.build_commits.append(commit)
            self.build_projects.append(index)
            yield Build(
                id=bid,
                project=index + 1,
                version=vid,
                date=date,
                length=rng.randint(20, 900) if state == "finished" else 0,
                type="html" if rng.random() < 0.9 else rng.choice(("pdf", "epub")),
                state=state,
                success=success,
                error="" if success or state != "finished" else rng.choice(
                    ("Command killed due to timeout or excessive memory consumption", "sphinx-build exited with status 2")
                ),
                commit=commit,
                output="build succeeded." if success else "",
            )

    def build_commands(self) -> Iterator[BuildCommand]:
        rng = self.rng
        cid = 0
        for index, start in enumerate(self.build_starts):
            bid = index + 1
            commit = self.build_commits[index]
            repo = self.project_repos[self.build_projects[index]]
            moment = start
            for template, description, output in STEPS[: rng.randint(3, 6)]:
                cid += 1
                seconds = rng.randint(0, 60)
                end = moment + timedelta(seconds=seconds)
                yield BuildCommand(
                    id=cid,
                    build=bid,
                    command=template.format(repo=repo, commit=commit),
                    start_time=moment,
                    end_time=end,
                    description=description,
                    output=output.format(short=commit[:7]),
                )
                moment = end + timedelta(seconds=1)
        self.n_commands = cid

    def pages(self) -> Iterator[Page]:
        rng = self.rng
        projects = rng.choices(range(self.n_projects), cum_weights=self.cum_weights, k=self.n_pages)
        used: set[tuple[int, str]] = set()
        for pgid, index in enumerate(projects, start=1):
            ids = self.versions_of[index]
            vid = ids[0] if rng.random() < 0.6 or len(ids) == 1 else rng.choice(ids[:3])
            topic = self.words(rng.randint(1, 3), vocabulary=SECTION_WORDS)
            document = "/".join(topic)
            if (vid, document) in used:
                document = f"{document}-{pgid}"
            used.add((vid, document))
            headings = [self.words(rng.randint(1, 3), vocabulary=SECTION_WORDS) for _ in range(rng.randint(1, 5))]
            sentences = [" ".join(self.words(rng.randint(6, 18))).capitalize() for _ in range(rng.randint(4, 12))]
            text = ". ".join(sentences) + "."
            # Section k starts at the page's k-th sentence (the last ones at its end, as empty sections).
            starts = list(itertools.accumulate((len(sentence) + 2 for sentence in sentences[:-1]), initial=0))
            sections = tuple(Section(id="-".join(words), title=" ".join(words).capitalize(),
                                     start=starts[k] if k < len(starts) else len(text))
                             for k, words in enumerate(headings))
            yield Page(
                id=pgid,
                project=index + 1,
                version=vid,
                path=document + ".html",
                document=document,
                title=" ".join(topic).title(),
                sections=sections,
                text=text,
            )

    def words(self, count: int, *, vocabulary: list[str] | None = None) -> list[str]:
        if vocabulary is not None:
            return self.rng.sample(vocabulary, count)
        return self.rng.choices(WORDS, cum_weights=self.word_weights, k=count)


__all__ = ["SCALES", "write_synthetic"]
