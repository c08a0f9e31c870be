"""SQLite FTS5 search: English stemming, Chinese two-character words, FTS syntax in queries, threads."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from ironmem.core.builtin.index import SearchIndex, build_match_query
from ironmem.core.builtin.ranking import index_terms


@pytest.fixture
def index(tmp_path: Path):
    idx = SearchIndex(tmp_path / "search.db")
    idx.add_turn("s1", "用户喜欢户外运动，昨天计划去爬山", "好的，注意安全", user_id=None)
    idx.add_turn("s1", "I went hiking in the Alps last summer", "Sounds lovely", user_id=None)
    idx.add_turn("s2", "東京の天気はどうですか", "晴れです", user_id=None)
    idx.sync_entries("user", ["Prefers 乌龙茶 in the morning"])
    yield idx
    idx.close()


def texts(hits) -> list[str]:
    return [h.text for h in hits]


@pytest.mark.parametrize("query", ["爬山", "户外运动", "计划", "山", "爬"])
def test_chinese_queries_match_inside_longer_runs(index: SearchIndex, query: str) -> None:
    assert any("爬山" in t for t in texts(index.search(query)))


def test_chinese_query_does_not_match_unrelated_text(index: SearchIndex) -> None:
    assert index.search("游泳") == []


def test_japanese_and_mixed_script(index: SearchIndex) -> None:
    assert any("東京" in t for t in texts(index.search("東京")))
    hits = index.search("乌龙茶")
    assert hits and hits[0].kind == "user"


def test_english_stemming_and_stopwords(index: SearchIndex) -> None:
    assert any("hiking" in t for t in texts(index.search("hike")))
    assert index.search("the and of") == []
    assert any("Alps" in t for t in texts(index.search("where did I go in the Alps?")))


def test_fts_syntax_in_user_text_is_literal(index: SearchIndex) -> None:
    for query in ['Alps"', "NEAR(hiking", "hiking OR", "*", "-Alps", "col:Alps", "a AND"]:
        index.search(query)  # must not raise an FTS5 syntax error
    assert build_match_query('find "kayak" NEAR x') == '"find" OR "kayak" OR "near"'


def test_index_terms() -> None:
    assert index_terms("去爬山").split() == ["去爬", "爬山", "山"]
    assert index_terms("ok 山 ok").split() == ["ok", "山", "ok"]
    assert index_terms("Hiking, hikes; went to the Café") == "hike hike go to the cafe"
    assert index_terms("abc東京") == "abc 東京 京"  # a CJK run is split from the letters before it


def test_search_from_worker_threads(index: SearchIndex) -> None:
    errors: list[BaseException] = []

    def work(n: int) -> None:
        try:
            for i in range(25):
                index.add_turn(f"t{n}", f"thread {n} message {i} about kayaking", "ok", user_id=None)
                assert index.search("kayaking")
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert index.turn_count() == 3 + 100


def test_index_rebuilds_when_it_lags_the_turns(tmp_path: Path) -> None:
    idx = SearchIndex(tmp_path / "s.db")
    idx.add_turn("s", "the falcon has landed", "ok", user_id=None)
    idx._conn.execute("INSERT INTO turns_fts(turns_fts) VALUES ('delete-all')")  # simulate an index that lost rows
    idx._conn.execute("UPDATE meta SET value = '0' WHERE key = 'turns_indexed'")
    idx.close()
    reopened = SearchIndex(tmp_path / "s.db")
    assert texts(reopened.search("falcon")) == ["User: the falcon has landed\nAssistant: ok"]


def test_a_chinese_sentence_finds_turns_sharing_its_words(tmp_path: Path) -> None:
    idx = SearchIndex(tmp_path / "s.db")
    idx.add_turn("s1", "下周要去杭州出差", "好的", user_id=None)
    idx.add_turn("s2", "帮我订一张机票", "已订", user_id=None)
    idx.add_turn("s3", "今天天气不错", "是的", user_id=None)
    found = texts(idx.search("去杭州的机票多少钱"))
    assert any("杭州" in t for t in found) and any("机票" in t for t in found)
    assert not any("天气" in t for t in found)
    idx.close()
