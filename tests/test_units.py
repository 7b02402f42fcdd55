"""Unit tests that run in-process, in milliseconds: the router, query parameters and pagination
links, conditional requests, the choice of content coding, and the dispatcher itself through
pytest-aiohttp's client on the real low-level server (no subprocess)."""

from datetime import UTC, datetime

import pytest
from multidict import MultiDict, MultiDictProxy

from conftest import DEMO
from docsrv.api.app import ROUTER, Dispatcher
from docsrv.api.errors import ApiError
from docsrv.api.params import V2_PAGING, boolean, excerpt, parse_page, positive_id, whole_number
from docsrv.api.state import ApiState
from docsrv.config import Settings
from docsrv.http.caching import not_modified, validators
from docsrv.http.compression import choose
from docsrv.observe.runtime import Runtime
from docsrv.serve.served import load_served


@pytest.mark.parametrize(("path", "template", "params"), [
    ("/api/v2/project/", "/api/v2/project/", {}),
    ("/api/v2/project/12/", "/api/v2/project/{id}/", {"id": "12"}),
    ("/api/v2/project/12/active_versions/", "/api/v2/project/{id}/active_versions/", {"id": "12"}),
    ("/api/v1/file/search/", "/api/v1/file/search/", {}),  # a fixed path wins over /api/v1/file/{id}/
    ("/api/v1/file/search", None, None),
    ("/api/v1/project/pip", "/api/v1/project/{id}", {"id": "pip"}),
    ("/api/v2/project/a/b/", None, None),
    ("/nowhere", None, None),
])
def test_router(path, template, params):
    found = ROUTER.match(path)
    if template is None:
        assert found is None
    else:
        assert found is not None and (found[0].template, found[1]) == (template, params)


def query(**pairs) -> MultiDictProxy:
    return MultiDictProxy(MultiDict(pairs))


def error(name: str, message: str) -> ApiError:
    return ApiError(400, {name: [message]})


def test_numbers_and_ids():
    assert [whole_number(t) for t in ("0", "17", "", "-1", "1e3", "١٢", "9" * 19)] == [0, 17, None, None, None, None, None]
    assert [positive_id(t) for t in ("0", "5", "x")] == [None, 5, None]


@pytest.mark.parametrize(("pairs", "limit", "offset"), [
    ({}, 10, 0), ({"limit": "5"}, 5, 0), ({"limit": "5000"}, 1000, 0), ({"offset": "30"}, 10, 30),
])
def test_pages(pairs, limit, offset):
    page = parse_page(query(**pairs), V2_PAGING, error)
    assert (page.limit, page.offset) == (limit, offset)
    assert page.next_offset(offset + limit) is None and page.next_offset(offset + limit + 1) == offset + limit
    assert page.previous_offset() == (None if offset == 0 else max(offset - limit, 0))


@pytest.mark.parametrize(("pairs", "body"), [
    ({"limit": "0"}, {"limit": ["A positive integer is required."]}),
    ({"limit": "x"}, {"limit": ["A positive integer is required."]}),
    ({"offset": "-1"}, {"offset": ["A non-negative integer is required."]}),
])
def test_bad_pages(pairs, body):
    with pytest.raises(ApiError) as raised:
        parse_page(query(**pairs), V2_PAGING, error)
    assert raised.value.body == body


def test_booleans_and_excerpts():
    assert [boolean(query(active=v), "active", error) for v in ("TRUE", "1", "false", "0")] == [True, True, False, False]
    assert boolean(query(), "active", error) is None
    with pytest.raises(ApiError):
        boolean(query(active="yes"), "active", error)
    assert excerpt("a" * 100) == "a" * 40 + "..." and excerpt("x\x00y") == "x\\x00y"


MODIFIED = datetime(2024, 2, 1, 12, 0, 0, tzinfo=UTC)


@pytest.mark.parametrize(("headers", "answer"), [
    ({"If-None-Match": '"abc"'}, True), ({"If-None-Match": 'W/"abc"'}, True), ({"If-None-Match": '"x", "abc"'}, True),
    ({"If-None-Match": "*"}, True), ({"If-None-Match": '"x"'}, False),
    ({"If-None-Match": '"x"', "If-Modified-Since": "Fri, 02 Feb 2024 00:00:00 GMT"}, False),  # If-None-Match decides
    ({"If-Modified-Since": "Thu, 01 Feb 2024 12:00:00 GMT"}, True), ({"If-Modified-Since": "Wed, 31 Jan 2024 12:00:00 GMT"}, False),
    ({"If-Modified-Since": "yesterday"}, False), ({}, False),
])
def test_conditional_requests(headers, answer):
    if_none_match = [headers["If-None-Match"]] if "If-None-Match" in headers else None
    asked = validators(if_none_match, headers.get("If-Modified-Since"))
    assert (asked is not None and not_modified(asked, '"abc"', MODIFIED)) is answer


@pytest.mark.parametrize(("accept", "coding"), [
    ("gzip, br", "br"), ("br;q=0.5, gzip;q=0.9", "gzip"), ("*", "br"), ("*;q=0, gzip", "gzip"), ("identity", None),
    ("br;q=0, gzip;q=0", None), ("x-gzip", "gzip"), ("gzip;q=abc, br;q=0.1", "br"), ("", None),
])
def test_content_coding_choice(accept, coding):
    assert choose(accept) == coding


@pytest.fixture(scope="module")
def state():
    served = load_served(DEMO, progress=False)
    return ApiState(served.store, served.search, Settings(public_url="https://api.example.org"), Runtime())


async def test_the_dispatcher_in_process(aiohttp_raw_server, aiohttp_client, state):
    client = await aiohttp_client(await aiohttp_raw_server(Dispatcher(state)))
    response = await client.get("/api/v2/project/?limit=2&utm=1")
    body = await response.json()
    assert response.status == 200 and body["next"] == "https://api.example.org/api/v2/project/?limit=2&offset=2"
    again = await client.get("/api/v2/project/?utm=2&limit=2", headers={"If-None-Match": response.headers["ETag"]})
    assert again.status == 304 and again.headers["ETag"] == response.headers["ETag"]
    assert state.runtime.metrics.hits["/api/v2/project/"] == 1 and state.runtime.metrics.misses["/api/v2/project/"] == 1
    assert (await client.post("/api/v2/project/")).status == 405
    second = await (await client.get("/api/v2/version/?active=true&limit=3&offset=4&x=1&project__slug=pip")).json()
    assert second["previous"] == "https://api.example.org/api/v2/version/?active=true&limit=3&offset=1&project__slug=pip"
    first = await (await client.get("/api/v2/version/?limit=3&offset=3&project__slug=pip")).json()
    assert first["previous"] == "https://api.example.org/api/v2/version/?limit=3&project__slug=pip"  # offset 0 is dropped
    moved = await client.get("/api/v2/project", allow_redirects=False)
    assert moved.status == 301 and moved.headers["Location"] == "/api/v2/project/"
    compressed = await client.get("/api/v2/build/?limit=5", headers={"Accept-Encoding": "br"})
    assert compressed.headers["Content-Encoding"] == "br" and compressed.headers["Vary"] == "Accept-Encoding, Origin"


def test_word_forms_are_the_inflections_a_passage_counts():
    from docsrv.search.query import word_forms

    assert {"read", "reads", "reading"} <= set(word_forms("read")) and "read" in word_forms("reading")
    assert {"line", "lines", "lined", "lining"} <= set(word_forms("line"))
    assert {"dictionary", "dictionaries"} <= set(word_forms("dictionaries")) and "dictionaries" in word_forms("dictionary")
    assert {"class", "classes"} <= set(word_forms("class")) and "clas" not in word_forms("class")
    assert word_forms("sort")[0] == "sort"  # the word as typed first


def test_operators_are_the_punctuation_a_build_names_read_longest_first():
    from docsrv.search.code_syntax import is_operator, operator_names, tokens
    from docsrv.snapshot.records import Entry, Page, Section

    named = {"//", "//=", "->", "|>"}
    assert tokens("x //= y; f(**kwargs) -> int", named.__contains__) == ["**kwargs", "//=", "->"]
    assert tokens("a |> b %% c", named.__contains__) == ["|>"]  # "%%" is no operator of this build
    assert not is_operator('"') and not is_operator("''") and is_operator("//")  # quotes mark phrases
    assert tokens("obj.__init__ and @property", set().__contains__) == ["__init__", "@property"]
    page = Page(id=1, project=1, version=1, path="ops.html", title="Operators", sections=(Section("s", "->"),),
                entries=(Entry(name="//", title="", role="index", anchor="", priority=1),
                         Entry(name="-> (arrow)", title="", role="index", anchor="", priority=1),
                         Entry(name="......", title="", role="index", anchor="", priority=1)))
    assert operator_names([page]) == {"//", "->"}


@pytest.mark.parametrize("seed", range(10))
def test_a_builds_operators_are_the_names_whose_keys_are_operators(seed):
    """``operator_names`` passes over a name with a word character before it makes its key: it
    finds what the keys of every name would (``is_operator(entry_key(name))``)."""
    import random

    from docsrv.search.code_syntax import is_operator, operator_names
    from docsrv.search.named_entries import entry_key
    from docsrv.snapshot.records import Entry, Page, Section

    rng = random.Random(seed)
    alphabet = "/=-><|*%&.:()!^~+'\"` \t_aZ9\u0130\u2160\u00e9"
    names = ["".join(rng.choices(alphabet, k=rng.randint(0, 7))) for _ in range(200)]
    page = Page(id=1, project=1, version=1, path="ops.html", title=names[0], sections=tuple(Section(f"s{n}", name) for n, name in enumerate(names[1:50])),
                entries=tuple(Entry(name=name, title=title, role="index", anchor="", priority=1) for name, title in zip(names[50::2], names[51::2], strict=False)))
    wanted = {key for name in names if is_operator(key := entry_key(name))}
    assert operator_names([page]) == wanted
    assert wanted  # the names hold operators


@pytest.mark.parametrize("seed", range(20))
def test_a_pages_operators_are_found_as_a_query_finds_them(seed):
    """The index finds the operators of a page's text with one regular expression
    (``search.code_syntax.page_tokens``); a query reads its runs of punctuation place by place
    (``tokens``). Both give the same tokens, in the same order, for any text and operators."""
    import random

    from docsrv.search.code_syntax import page_tokens, tokens

    rng = random.Random(seed)
    alphabet = "/=-><|*%&.:;()[]{}!?^~+@_ ab\n"
    operators = frozenset("".join(rng.choices("/=-><|*%&.:!^~+", k=rng.randint(1, 4))) for _ in range(rng.randint(0, 12)))
    for _ in range(50):
        text = "".join(rng.choices(alphabet, k=rng.randint(0, 80)))
        assert page_tokens(text, operators) == tokens(text, operators.__contains__), (text, sorted(operators))


@pytest.mark.parametrize("seed", range(40))
def test_the_largest_key_of_a_store_dictionary_changed_by_changesets_is_its_largest(seed):
    """``utils.sequences.largest_key`` (the last version id, which sets the search index's blocks)
    of a dictionary, and of overlays of it after changesets that add, replace and remove keys (the
    largest among them), is the largest key it holds, None when it holds none."""
    import random

    from docsrv.utils.sequences import Overlay, largest_key

    rng = random.Random(seed)
    found: dict[int, str] | Overlay[int, str] = {key: "v" for key in rng.sample(range(1000), rng.randrange(0, 30))}
    for _changeset in range(rng.randrange(1, 6)):
        keys = list(found)
        changes: dict[int, str | None] = {}
        if keys and rng.random() < 0.5:
            changes[max(keys)] = None
        for key in rng.sample(keys, min(len(keys), rng.randrange(0, 5))):
            changes[key] = rng.choice([None, "w"])
        for _added in range(rng.randrange(0, 4)):
            changes[rng.randrange(1200)] = "n"
        found = Overlay.of(found, changes)
        assert largest_key(found) == max(list(found), default=None)
    assert largest_key({}) is None and largest_key(Overlay.of({3: "v"}, {3: None})) is None
