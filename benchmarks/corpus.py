"""A deterministic, varied conversation corpus for the benchmarks (English with ~15% Chinese turns).

Real chat history has a Zipf-like vocabulary: a few words in almost every turn ("the", "help", "code"), a long
tail of names, projects, error codes and places that show up a handful of times. The generator mixes sentence
templates with a common-word pool (drawn with Zipf weights) and a long tail of synthetic proper nouns, so a
search for a rare project name has a few hits while a search for "python error" has tens of thousands.

Example:
    >>> rows = list(turn_rows(3, seed=1))
    >>> len(rows), rows[0][0]
    (3, 'bench-0')
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterator

__all__ = ["Corpus", "turn_rows", "EN_QUERIES", "ZH_QUERIES", "CORPUS_VERSION"]

#: Bump when the generator changes: cached benchmark databases are keyed by it.
CORPUS_VERSION = "corpus-v1"

_COMMON = """time project code error test data user file model server update question issue team meeting plan
week today tomorrow yesterday database query function class module package version release deploy build config
python javascript rust docker kubernetes api request response token cache memory prompt agent tool search index
result report draft email document note idea budget cost price order invoice customer client design review
feature bug fix patch branch commit merge pull change schedule trip flight hotel train dinner lunch coffee tea
book movie music gym run walk garden weather rain sun family kids friend birthday gift doctor health sleep
recipe pasta rice soup salad bread cake chocolate morning evening weekend holiday vacation beach mountain
city office home kitchen car bike bus laptop phone screen keyboard backup password account login network
latency throughput benchmark metric dashboard alert incident log trace span queue worker thread process
lock file disk storage bucket table column row schema migration index vector embedding graph node edge""".split()

_VERBS = """fix write review check update deploy schedule book plan cancel move rename refactor test debug
profile measure compare summarize translate explain remember find share send sign approve merge rebase
install configure migrate backup restore monitor rotate archive""".split()

_ADJ = """quick slow broken flaky urgent small large new old final rough clean messy stable nightly weekly
monthly remote local shared private public secure expensive cheap healthy spicy sweet quiet busy""".split()

_CITIES = """Lisbon Berlin Tokyo Osaka Nairobi Lima Oslo Denver Austin Porto Seoul Taipei Hanoi Krakow Dublin
Montreal Valencia Tbilisi Cusco Reykjavik""".split()

_SYLLABLES = """ka ri to ne mo sa lu vi de ra po zen tor mil ash bel cor dan el fin gar hol ix jun kel lor
mar nor ost pel quin ros sil tam ul ver wen yor zal bri cha dro fle gra""".split()

# Chinese: everyday words (2-4 characters) and sentence frames.
_ZH_WORDS = """爬山 咖啡 工作 项目 会议 周末 旅行 北京 上海 杭州 成都 深圳 数据库 服务器 代码 测试 部署 版本 报告
预算 客户 合同 生日 礼物 医生 健康 跑步 游泳 电影 音乐 火锅 饺子 面条 米饭 茶叶 天气 下雨 晴天 朋友 家人
孩子 学校 考试 老师 同事 老板 邮件 文档 计划 问题 错误 日志 缓存 搜索 索引 模型 提示词 记忆 飞机 高铁 酒店
机票 护照 签证 公园 博物馆 图书馆 超市 菜谱 蛋糕 巧克力 早餐 午饭 晚饭 周一 周五 明天 昨天 下周 上个月""".split()

_ZH_USER = [
    "我们{a}去{b}吧，你觉得怎么样？",
    "帮我记一下：{a}的{b}要在{c}之前完成。",
    "上次说的{a}和{b}的事情，后来怎么样了？",
    "{a}的时候我喜欢{b}，不太喜欢{c}。",
    "能不能帮我查一下{a}相关的{b}？",
    "我想订{a}去{b}，{c}出发。",
]
_ZH_ASSISTANT = [
    "好的，我已经记下了{a}和{b}。",
    "根据之前的记录，{a}已经安排在{b}。",
    "{a}的问题我查了一下，主要是{b}导致的。",
    "可以的，我建议先处理{a}，然后再看{b}。",
]

_EN_USER = [
    "Can you {v} the {adj} {n1} for {proper}?",
    "What did we decide about the {n1} {n2} last {when}?",
    "Remind me to {v} the {n1} before the {n2} on {day}.",
    "I think the {n1} in {proper} is {adj} again, can you {v} it?",
    "My {n1} meeting with {person} moved to {day}; please {v} the {n2}.",
    "How do I {v} a {n1} {n2} in {lang} without breaking the {n3}?",
    "We are flying to {city} for the {n1} {n2}, can you {v} a {n3}?",
    "The {proper} {n1} throws {code} when I {v} the {n2}.",
    "Let's {v} the {n1} and the {n2} together, {person} agreed.",
    "Any news on the {adj} {n1} for {proper}? {person} asked about the {n2}.",
]
_EN_ASSISTANT = [
    "Sure. I will {v} the {n1} for {proper} and send {person} the {n2} by {day}.",
    "Last {when} we agreed to keep the {n1} {adj} and move the {n2} to {proper}.",
    "The {code} in {proper} comes from the {n1} {n2}; {v} the {n3} and run the {n4} again.",
    "Done: the {n1} is {adj} now. Next step is to {v} the {n2} with {person}.",
    "In {lang} you can {v} the {n1} with a small {n2} wrapper; keep the {n3} {adj}.",
    "Noted. {person} prefers the {n1} in {city}; I added it to the {n2} for {day}.",
    "I checked the {n1} logs: the {n2} was {adj} because the {n3} hit its limit.",
]

_DAYS = "Monday Tuesday Wednesday Thursday Friday Saturday Sunday".split()
_WHEN = "week month sprint quarter meeting call".split()
_LANGS = "Python Rust Go TypeScript Java SQL Bash".split()

#: English session_search queries: a rare project name, a medium phrase, and very common terms.
EN_QUERIES = [
    "what did we decide about the database migration",
    "python error when I deploy the server",
    "flight to Lisbon hotel",
    "Kamirito release",
    "E4242 error",
    "budget review with the client",
    "coffee",
    "memory cache latency benchmark",
]
#: Chinese session_search queries: two-character words (need the bigram scheme), phrases, a full question.
ZH_QUERIES = ["爬山", "数据库 部署", "上次说的咖啡", "杭州 机票", "火锅", "提示词 记忆"]


class Corpus:
    """Generates turns ``(user, assistant)`` deterministically from ``seed``.

    Example:
        >>> c = Corpus(seed=7)
        >>> user, assistant = c.turn()
        >>> isinstance(user, str) and isinstance(assistant, str)
        True
    """

    def __init__(self, seed: int = 0, *, zh_share: float = 0.15, tail_size: int = 20000) -> None:
        self.rng = random.Random(seed)
        self.zh_share = zh_share
        rng = random.Random(12345)  # the vocabulary is the same for every seed
        tail: set[str] = {"Kamirito"}
        while len(tail) < tail_size:
            tail.add("".join(rng.choice(_SYLLABLES) for _ in range(rng.randint(2, 4))).capitalize())
        self.proper = sorted(tail)
        self.people = [p for p in self.proper[: tail_size // 10]]
        self.codes = [f"E{n}" for n in range(1000, 6000)]
        self._common_w = list(itertools.accumulate(1.0 / (i + 1) ** 0.9 for i in range(len(_COMMON))))
        self._tail_w = list(itertools.accumulate(1.0 / (i + 1) ** 0.6 for i in range(len(self.proper))))
        self._zh_w = list(itertools.accumulate(1.0 / (i + 1) ** 0.8 for i in range(len(_ZH_WORDS))))
        shuffled = list(self.proper)
        rng.shuffle(shuffled)
        self._tail_order = shuffled

    def _common(self) -> str:
        return self.rng.choices(_COMMON, cum_weights=self._common_w)[0]

    def _proper(self) -> str:
        return self.rng.choices(self._tail_order, cum_weights=self._tail_w)[0]

    def _zh(self) -> str:
        return self.rng.choices(_ZH_WORDS, cum_weights=self._zh_w)[0]

    def _fill(self, template: str) -> str:
        r = self.rng
        return template.format(
            v=r.choice(_VERBS), adj=r.choice(_ADJ), n1=self._common(), n2=self._common(), n3=self._common(),
            n4=self._common(), proper=self._proper(), person=r.choice(self.people), day=r.choice(_DAYS),
            when=r.choice(_WHEN), lang=r.choice(_LANGS), city=r.choice(_CITIES), code=r.choice(self.codes),
        )

    def turn(self) -> tuple[str, str]:
        """One exchange: ``(user message, assistant reply)``."""
        r = self.rng
        if r.random() < self.zh_share:
            user = r.choice(_ZH_USER).format(a=self._zh(), b=self._zh(), c=self._zh())
            assistant = r.choice(_ZH_ASSISTANT).format(a=self._zh(), b=self._zh())
            if r.random() < 0.3:  # mixed-language turns happen
                assistant += " " + self._fill(r.choice(_EN_ASSISTANT))
            return user, assistant
        user = self._fill(r.choice(_EN_USER))
        assistant = " ".join(self._fill(r.choice(_EN_ASSISTANT)) for _ in range(r.randint(1, 3)))
        return user, assistant

    def user_message(self) -> str:
        """A fresh user message (for the per-turn benchmark)."""
        return self.turn()[0]


def turn_rows(
    n: int, *, seed: int = 0, sessions_of: int = 40, users: int = 1, start_ts: float = 1.7e9
) -> Iterator[tuple[str, str | None, float, str, str]]:
    """``n`` rows for :meth:`SearchIndex.add_turns`: ``(session_id, user_id, ts, user, assistant)``.

    Turns are grouped into sessions of ``sessions_of`` turns; ``users`` > 1 spreads sessions over user ids.
    """
    corpus = Corpus(seed)
    for i in range(n):
        session = i // sessions_of
        user_id = None if users <= 1 else f"user-{session % users}"
        user, assistant = corpus.turn()
        yield f"bench-{session}", user_id, start_ts + i * 30.0, user, assistant
