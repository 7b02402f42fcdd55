"""The highlight files the index build writes, read back as a search reads them: fragments
around every occurrence, cut only where HTML and UTF-8 stay whole, on pages of any shape.
Every test runs twice: with word positions recorded, as for long pages, and with pages
scanned when shown, as short ones are."""

import html
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from docsrv.search import highlight
from docsrv.search.highlight import MAX_POSITIONS, Highlights, HighlightWriter, query_words

V2 = {"count": 3, "width": 100, "open_tag": b"<em>", "close_tag": b"</em>", "ellipsis": False}


@pytest.fixture(params=["recorded", "scanned"])
def pages(request, tmp_path, monkeypatch):
    """Write ``texts`` as pages 1, 2, ... and open them; returns (highlights, slots)."""
    if request.param == "recorded":
        monkeypatch.setattr(highlight, "SHORT_PAGE_BYTES", 0)

    def write(*texts):
        with HighlightWriter(tmp_path / "highlight") as writer:
            slots = [writer.add(page_id, text) for page_id, text in enumerate(texts, start=1)]
        return Highlights(tmp_path / "highlight"), slots

    return write


def words(*terms):
    return query_words(terms)


def unmarked(fragment: str) -> str:
    return html.unescape(fragment.replace("<em>", "").replace("</em>", ""))


def test_slots_map_back_to_page_ids(pages):
    highlights, slots = pages("one", "two", "three")
    assert [highlights.page_ids[slot] for slot in slots] == [1, 2, 3]


@pytest.mark.parametrize("query", [("alpha",), ("alpha", "beta")])
def test_every_occurrence_inside_a_fragment_is_marked_even_past_the_recorded_ones(pages, query):
    # Three fragments hold more occurrences than are recorded (MAX_POSITIONS), or read when
    # several words are merged (MERGE_POSITIONS).
    text = " ".join([" ".join(query)] * (MAX_POSITIONS * 3))
    highlights, [slot] = pages(text)
    fragments = highlights.fragments(slot, words(*query), **V2)
    assert fragments
    for fragment in fragments:
        for word in query:
            assert word not in fragment.replace(f"<em>{word}</em>", "")
        assert unmarked(fragment) in text


def test_fragments_do_not_overlap_and_follow_the_page(pages):
    text = " ".join(f"word{i} needle" if i % 7 == 0 else f"word{i}" for i in range(400))
    highlights, [slot] = pages(text)
    fragments = [unmarked(f) for f in highlights.fragments(slot, words("needle"), **V2)]
    where = [text.index(f) for f in fragments]
    assert where == sorted(where)
    for (start, fragment), next_start in zip(zip(where, fragments, strict=True), where[1:], strict=False):
        assert start + len(fragment) <= next_start


@pytest.mark.parametrize(
    ("text", "query", "fragment"),
    [
        pytest.param("The Widget, a WIDGET and widgets; widget_factory and widget.", ["widget"],
                     "The <em>Widget</em>, a <em>WIDGET</em> and widgets; widget_factory and <em>widget</em>.",
                     id="whole words in any case"),
        pytest.param('lt is <b>less</b> & "quoted" amp\'s x27', ["lt", "amp", "quot", "x27", "b"],
                     "<em>lt</em> is &lt;<em>b</em>&gt;less&lt;/<em>b</em>&gt; &amp; &quot;quoted&quot; <em>amp</em>&#x27;s <em>x27</em>",
                     id="text escaped, entities never marked"),
        pytest.param("Die Übersetzung ist naïve. ÜBERSETZUNG!", ["übersetzung"],
                     "Die <em>Übersetzung</em> ist naïve. <em>ÜBERSETZUNG</em>!", id="non-ASCII words by their lower case"),
        pytest.param("context managers: a context manager is a Manager of context", ["context", "manager"],
                     "<em>context</em> managers: a <em>context</em> <em>manager</em> is a <em>Manager</em> of <em>context</em>",
                     id="several words in page order"),
    ],
)
def test_the_fragment_of_a_short_text(pages, text, query, fragment):
    highlights, [slot] = pages(text)
    assert highlights.fragments(slot, words(*query), **V2) == [fragment]


@pytest.mark.parametrize("filler", ["&" * 400, "<>" * 200, '"' * 400, "ウィジェット" * 80, "🎛" * 300, "é" * 400])
def test_cuts_without_spaces_keep_entities_and_characters_whole(pages, filler):
    text = filler + " needle " + filler
    highlights, [slot] = pages(text)
    [fragment] = highlights.fragments(slot, words("needle"), **V2)
    assert "<em>needle</em>" in fragment
    assert re.fullmatch(r"(?:[^&]|&(?:amp|lt|gt|quot|#x27);)*", fragment)
    assert unmarked(fragment) in text
    assert 30 <= len(unmarked(fragment)) <= 130


def test_fragments_are_about_width_characters_on_non_ascii_pages(pages):
    text = " ".join(["ウィジェット の 設定"] * 60 + ["needle"] + ["ウィジェット の 設定"] * 60)
    highlights, [slot] = pages(text)
    [fragment] = highlights.fragments(slot, words("needle"), **V2)
    assert 80 <= len(unmarked(fragment)) <= 130


def test_v1_snippets_say_where_the_page_is_cut(pages):
    text = " ".join(f"w{i}" for i in range(100)) + " needle " + " ".join(f"w{i}" for i in range(100))
    highlights, [slot] = pages(text)
    [snippet] = highlights.fragments(slot, words("needle"), count=1, width=200, open_tag=b'<span class="highlighted">',
                                     close_tag=b"</span>", ellipsis=True)
    assert snippet.startswith("...") and snippet.endswith("...")
    assert '<span class="highlighted">needle</span>' in snippet


def test_a_word_not_on_the_page_gives_no_fragment_and_the_opening_stands_in(pages):
    text = "Widgetry speaks many languages. " * 10
    highlights, [slot] = pages(text)
    assert highlights.fragments(slot, words("absent"), **V2) == []
    opening = highlights.opening(slot, 100)
    assert text.startswith(opening) and 50 < len(opening) <= 100 and not opening.endswith(" ")


def test_an_empty_page_and_an_empty_file_set(pages):
    highlights, [slot] = pages("")
    assert highlights.fragments(slot, words("x"), **V2) == []
    assert highlights.opening(slot, 100) == ""


def test_only_long_pages_take_room_for_word_positions(tmp_path):
    long_text = " ".join(f"w{i % 500}" for i in range(highlight.SHORT_PAGE_BYTES))
    with HighlightWriter(tmp_path / "highlight") as writer:
        short, long = writer.add(1, "a short page with six words"), writer.add(2, long_text)
    highlights = Highlights(tmp_path / "highlight")
    assert len(highlights.keys) == 500
    assert highlights.fragments(short, words("six"), **V2) == ["a short page with <em>six</em> words"]
    assert highlights.fragments(long, words("w7"), **V2)[0].startswith("w0 w1 w2 w3 w4 w5 w6 <em>w7</em> w8")


PIECES = [
    "the", "broker", "Straße", "naïve", "ウィジェット", "🎛", "x", "--broker", "amqp://localhost:5672//", "https://docs.example.org/a?b=c&d=e",
    "f(*args, **kwargs)", "__init__", "a.b_c-d", "<b>bold</b>", "&amp;", "&", "<", ">", "\"", "'", "@decorator", "x += 1", "...",
    "C++", "i18n", "ΑΒΓ", "ﬁne", "İstanbul", "ǅ",
]
page_texts = st.lists(st.one_of(st.sampled_from(PIECES), st.text(min_size=1, max_size=12)), min_size=1, max_size=120).map(" ".join)


@settings(max_examples=150, deadline=None)
@given(data=st.data(), texts=st.lists(page_texts, min_size=1, max_size=3), recorded=st.booleans())
def test_every_fragment_is_an_exact_window_of_its_page(tmp_path_factory, data, texts, recorded):
    """DECISIONS.md section 3: a fragment with its <em> tags stripped and unescaped is a
    substring of the page's text, whatever the page holds and whatever is typed."""
    from docsrv.search.query import read_query

    directory = tmp_path_factory.mktemp("fragments") / "highlight"
    with pytest.MonkeyPatch.context() as patch:
        if recorded:
            patch.setattr(highlight, "SHORT_PAGE_BYTES", 0)
        with HighlightWriter(directory) as writer:
            slots = [writer.add(page_id, text) for page_id, text in enumerate(texts, start=1)]
    highlights = Highlights(directory)
    typed = data.draw(st.lists(st.one_of(st.sampled_from(PIECES), st.text(max_size=8)), min_size=1, max_size=4).map(" ".join))
    found_words, phrases = read_query(typed)
    query = query_words(found_words + [word for phrase in phrases for word in phrase])
    for slot, text in zip(slots, texts, strict=True):
        for fragment in highlights.fragments(slot, query, **V2):
            assert unmarked(fragment) in text, (typed, fragment)
        assert html.unescape(highlights.opening(slot, 100)) in text


def test_a_passage_is_the_earliest_window_holding_the_most_words_in_any_form(pages):
    """Issue 34: each group is the forms of one query word; the window counts groups, not
    occurrences, and ends within ``span`` bytes of where it starts."""
    text = "Files are read here. " + "filler " * 20 + "It reads a single line from the file. And lines again, read from files."
    highlights, [slot] = pages(text)
    groups = [words("read", "reads"), words("file", "files"), words("line", "lines")]
    start = text.index("reads a single")
    assert highlights.passage(slot, groups, 40) == (3, start)
    assert highlights.passage(slot, groups, 10) == (2, 0)  # "Files are read": two of them, first
    assert highlights.passage(slot, [words("absent"), words("nowhere")], 40) == (0, -1)


def test_fragments_start_at_the_passage_and_mark_every_match_in_them(pages):
    text = "alpha first. " + "filler " * 30 + "then alpha beta together. " + "filler " * 30 + "alpha last."
    highlights, [slot] = pages(text)
    passage = highlights.passage(slot, [words("alpha"), words("beta")], 40)[1]
    fragments = highlights.fragments(slot, words("alpha", "beta"), **V2, passage=passage)
    assert fragments[0] == "filler filler filler filler then <em>alpha</em> <em>beta</em> together. " + " ".join(["filler"] * 7)
    assert "first" not in " ".join(fragments)  # without the passage, the first fragment is "alpha first"
    assert all(unmarked(fragment) in text for fragment in fragments)


def test_a_page_of_a_block_keeps_its_slot_when_another_version_leaves(tmp_path):
    """In a block of versions a page's slot is its version's offset in the block and its place
    among its version's pages: the pages of versions 8, 8 and 12 of the block from 8 keep their
    slots once version 10 between them has gone, and each slot finds its page. In a shard of one
    version (an odd key) slots are places."""
    from docsrv.search.highlight import SHARD_BITS, VERSION_BITS, ShardedHighlights, slots_of
    from docsrv.search.shards import VERSION_PAGES

    assert VERSION_PAGES <= 1 << VERSION_BITS  # a block's version of the most pages is numbered within its bits
    block = 16  # the block of version ids from 8 (search.shards.Layout)
    before, _ = slots_of(block, [8, 8, 10, 12])
    after, table = slots_of(block, [8, 8, 12])
    assert after == [before[0], before[1], before[3]] == [block << SHARD_BITS | 0, block << SHARD_BITS | 1, block << SHARD_BITS | 4 << VERSION_BITS]
    assert table == [0, 0, 4, 2]
    assert slots_of(2 * 9 + 1, [9, 9]) == ([19 << SHARD_BITS | 0, 19 << SHARD_BITS | 1], [])
    with HighlightWriter(tmp_path / "block", table) as writer:
        for page_id in (101, 102, 103):
            writer.add(page_id, f"page {page_id}")
    files = ShardedHighlights({block: Highlights(tmp_path / "block")})
    assert [files.page_id(slot) for slot in after] == [101, 102, 103]
    assert [html.unescape(files.opening(slot, 100)) for slot in after] == ["page 101", "page 102", "page 103"]


def test_a_versions_file_that_does_not_fit_the_pages_does_not_open(tmp_path):
    with HighlightWriter(tmp_path / "highlight", [0, 0, 4, 5]) as writer:  # the second version starts past the last page
        for page_id in (1, 2):
            writer.add(page_id, "text")
    with pytest.raises(ValueError, match="versions does not start each version at a slot"):
        Highlights(tmp_path / "highlight")


def test_a_versions_file_of_no_whole_pairs_does_not_open(tmp_path):
    with HighlightWriter(tmp_path / "highlight", [0, 0, 4]) as writer:
        writer.add(1, "text")
    with pytest.raises(ValueError, match="versions holds 3 numbers, not pairs"):
        Highlights(tmp_path / "highlight")


@settings(max_examples=60, deadline=None)
@given(data=st.data(), texts=st.lists(page_texts, min_size=1, max_size=8), before=st.lists(page_texts, max_size=2))
def test_a_run_of_pages_copied_at_once_is_written_as_copied_page_by_page(tmp_path_factory, data, texts, before):
    """A range of a shard that a change left alone takes its pages' records from the earlier
    files at once (``HighlightWriter.copy_run``): the files are byte for byte those that copying
    each page (``add`` with its earlier record) writes, after whatever pages came before it."""
    root = tmp_path_factory.mktemp("run")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(highlight, "SHORT_PAGE_BYTES", data.draw(st.sampled_from([0, 40])))  # words recorded for all, or some
        with HighlightWriter(root / "earlier") as writer:
            for page_id, text in enumerate(texts, start=1):
                writer.add(page_id, text)
        earlier = Highlights(root / "earlier")
        first = data.draw(st.integers(0, len(texts) - 1))
        count = data.draw(st.integers(0, len(texts) - first))
        for name in ("page-by-page", "run"):
            with HighlightWriter(root / name) as writer:
                for page_id, text in enumerate(before, start=100):
                    writer.add(page_id, text)
                if name == "run":
                    writer.copy_run(earlier, first, count)
                else:
                    for place in range(first, first + count):
                        writer.add(place + 1, texts[place], (earlier, place))
    names = sorted(path.name for path in (root / "run").iterdir())
    assert names == sorted(path.name for path in (root / "page-by-page").iterdir()) and "entries" in names
    for name in names:
        assert (root / "run" / name).read_bytes() == (root / "page-by-page" / name).read_bytes(), name
    copied = Highlights(root / "run")
    assert copied.page_ids.tolist() == [*range(100, 100 + len(before)), *range(first + 1, first + count + 1)]
