"""PostgreSQL search: candidate lists cached per process stay exact while other machines add turns."""

from __future__ import annotations

import threading

from ironmem.core.builtin.postgres import PostgresStorage


def test_cached_lists_see_turns_added_by_another_machine(pg_url: str) -> None:
    a, b = PostgresStorage(pg_url), PostgresStorage(pg_url)
    try:
        b.index.add_turns([("old", None, float(i), f"zebra crossing {i}", "ok") for i in range(700)])
        first = a.index.search("zebra", kinds=("turn",), limit=3)  # caches the list of 'zebra' in a
        assert [h.text for h in first][0].startswith("User: zebra crossing 699")
        b.index.add_turn("new", "a zebra escaped the zoo", "oh no", user_id=None)
        hits = a.index.search("zebra escaped", kinds=("turn",), limit=3)
        assert hits[0].session_id == "new"
    finally:
        a.close()
        b.close()


def test_cached_search_equals_cold_search_under_concurrent_inserts(pg_url: str) -> None:
    """Writers on 4 connections insert while a reader searches with its cache; afterwards the cached answers
    equal the answers of a reader with no cache (ids are handed out in commit order)."""
    reader, writer = PostgresStorage(pg_url), PostgresStorage(pg_url, pool_size=4)
    words = ["deploy", "kestrel", "budget", "river", "tea"]
    try:
        stop = threading.Event()

        def write(n: int) -> None:
            for i in range(60):
                writer.index.add_turn(f"w{n}", f"{words[i % 5]} {words[(i + n) % 5]} note {n}-{i}", "ok", user_id=None)

        def search() -> None:
            while not stop.is_set():
                for w in words:
                    reader.index.search(w, kinds=("turn",), limit=5)

        threads = [threading.Thread(target=write, args=(n,)) for n in range(4)]
        searcher = threading.Thread(target=search)
        searcher.start()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        stop.set()
        searcher.join()
        queries = words + ["deploy budget", "kestrel tea river"]
        warm = [[(h.text, h.score) for h in reader.index.search(q, kinds=("turn",), limit=20)] for q in queries]
        reader.index.clear_caches()
        cold = [[(h.text, h.score) for h in reader.index.search(q, kinds=("turn",), limit=20)] for q in queries]
        assert warm == cold
        assert all(len(w) == 20 for w in warm[:5])
        assert reader.index.turn_count() == 240
    finally:
        reader.close()
        writer.close()


def test_a_version_1_database_is_re_tokenized_by_the_migration(pg_url: str) -> None:
    """Version 1 indexed with the server's stemmer; version 2 re-tokenizes every turn and entry in Python."""
    from ironmem.core.builtin.postgres import SCHEMA_VERSION

    storage = PostgresStorage(pg_url)
    try:
        storage.index.add_turn("s", "I went hiking near 爬山 trails", "ok", user_id=None)
        storage.transact("", ["memory"], lambda cur: {"memory": ["Deploys on Fridays"]})
        s = storage.schema

        def downgrade(conn) -> None:  # what a version-1 database holds
            with conn.transaction():
                conn.execute(f"UPDATE {s}.turns SET terms = to_tsvector('simple', 'x')")
                conn.execute(f"UPDATE {s}.entries SET terms = to_tsvector('simple', 'x')")
                conn.execute(f"DELETE FROM {s}.migrations WHERE version > 1")

        storage.run("downgrade", downgrade)
        assert storage.index.search("hike", kinds=("turn",)) == []
    finally:
        storage.close()
    again = PostgresStorage(pg_url)
    try:
        assert again.schema_version() == SCHEMA_VERSION
        again.index.clear_caches()
        assert [h.session_id for h in again.index.search("when did she go hiking", kinds=("turn",))] == ["s"]
        assert again.index.search("爬山", kinds=("turn",))
        assert again.run("count", lambda conn: conn.execute(
            f"SELECT count(*) FROM {again.schema}.entries WHERE terms @@ 'friday'::tsquery").fetchone()[0]) == 1
    finally:
        again.close()
