"""Token estimators: throughput and error of the heuristic against tiktoken o200k.

Samples come from this machine, no downloads: English prose (the Python reference manual text
that ships with the standard library in ``pydoc_data``), Chinese (paragraphs embedded below,
shuffled), code (standard-library Python sources) and JSON (generated API-style records, pretty
printed, and the same compact). Each sample is cut into ~2,000-character chunks; the error is
the mean absolute percentage error per chunk against o200k. Throughput is o200k tokens per
second of counting (best of ``--repeat`` runs, the two estimators alternating).

    python bench/estimator.py           # ~200 kB per sample
    python bench/estimator.py --quick   # tiny sizes (smoke test)
"""

from __future__ import annotations

import argparse
import inspect
import json
import random
import statistics
import time
from collections.abc import Callable

from _common import header, ratio, table

from obsmem.errors import MissingExtraError
from obsmem.tokens import HeuristicEstimator, TiktokenEstimator

CHINESE = [
    "我们下周三要去杭州出差，记得提前订好高铁票和酒店。",
    "这个项目的预算已经超出了百分之十五，需要和财务部门重新沟通。",
    "她最喜欢的咖啡是浓缩咖啡，每天早上都要喝一杯。",
    "数据库迁移计划在周末进行，预计停机时间不超过两个小时。",
    "孩子们放暑假以后，我们打算带他们去海边度假一周。",
    "请把会议纪要整理好，并在今天下班前发给所有参会人员。",
    "新版本的发布日期推迟到了下个月，因为还有几个严重的缺陷没有修复。",
    "他说自己对花生过敏，所以点菜的时候一定要注意。",
    "客户反馈说登录页面加载太慢，我们需要优化前端资源的大小。",
    "上个周末我们在公园里野餐，天气非常好，大家都很开心。",
    "医生建议他每天散步三十分钟，并且少吃油腻的食物。",
    "这本书讲述了一个普通人在大城市里奋斗的故事，非常感人。",
    "公司决定明年在深圳开设新的办公室，招聘五十名工程师。",
    "我的生日是三月十二日，今年想和朋友们一起去唱歌。",
    "如果明天下雨的话，足球比赛就改到室内体育馆举行。",
    "为了节省开支，我们取消了原定的年会，改成线上聚会。",
]

CODE_MODULES = ("argparse", "json.decoder", "json.encoder", "asyncio.base_events", "dataclasses")


def english(size: int) -> str:
    from pydoc_data.topics import topics

    text = "\n\n".join(topics[k] for k in sorted(topics))
    return text[:size]


def chinese(size: int, rng: random.Random) -> str:
    out: list[str] = []
    length = 0
    while length < size:
        paragraph = "".join(rng.sample(CHINESE, 5))
        out.append(paragraph)
        length += len(paragraph) + 1
    return "\n".join(out)[:size]


def code(size: int) -> str:
    import importlib

    sources = [inspect.getsource(importlib.import_module(name)) for name in CODE_MODULES]
    return "\n\n".join(sources)[:size]


def json_records(size: int, rng: random.Random, *, indent: int | None = 2) -> str:
    records: list[dict[str, object]] = []
    length = 0
    statuses = ["pending", "shipped", "delivered", "cancelled"]
    while length < size:
        n = len(records)
        record = {
            "id": f"ord_{rng.getrandbits(48):012x}",
            "customer": {
                "id": 10_000 + n,
                "name": f"Customer {n}",
                "email": f"user{n}@example.com",
            },
            "created_at": f"2025-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}T"
            f"{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:00Z",
            "status": rng.choice(statuses),
            "items": [
                {
                    "sku": f"SKU-{rng.randint(1000, 9999)}",
                    "qty": rng.randint(1, 5),
                    "price": round(rng.uniform(1, 200), 2),
                }
                for _ in range(rng.randint(1, 4))
            ],
            "notes": None if rng.random() < 0.6 else "leave at the door",
        }
        records.append(record)
        length += len(json.dumps(record, indent=indent))
    return json.dumps(records, indent=indent)[:size]


def chunks(text: str, size: int = 2_000) -> list[str]:
    out: list[str] = []
    current: list[str] = []
    length = 0
    lines = text.splitlines(keepends=True)
    # A line longer than a chunk (compact JSON) is cut into chunk-sized pieces.
    pieces = [line[i : i + size] for line in lines for i in range(0, len(line), size)]
    for line in pieces:
        current.append(line)
        length += len(line)
        if length >= size:
            out.append("".join(current))
            current, length = [], 0
    if current:
        out.append("".join(current))
    return out


def best_time(count: Callable[[str], int], pieces: list[str]) -> float:
    started = time.perf_counter()
    for piece in pieces:
        count(piece)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=200_000, help="characters per sample")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="tiny sizes for the smoke test")
    args = parser.parse_args()
    if args.quick:
        args.size, args.repeat = 20_000, 2
    header("token estimators: heuristic vs tiktoken o200k", chars_per_sample=args.size)
    try:
        exact = TiktokenEstimator()
    except MissingExtraError as exc:
        print(f"SKIPPED: tiktoken o200k is not available here ({exc})")
        return
    heuristic = HeuristicEstimator()
    rng = random.Random(5)
    samples = {
        "English": english(args.size),
        "Chinese": chinese(args.size // 3, rng),  # ~3x the tokens per character
        "code": code(args.size),
        "JSON": json_records(args.size, rng),
        "JSON compact": json_records(args.size, rng, indent=None),
    }
    rows = []
    results: dict[str, tuple[float, float, float]] = {}
    for name, text in samples.items():
        pieces = chunks(text)
        truth = [exact.count_text(p) for p in pieces]
        guess = [heuristic.count_text(p) for p in pieces]
        errors = [abs(g - t) / t * 100 for g, t in zip(guess, truth, strict=True) if t]
        mape = statistics.fmean(errors)
        bias = (sum(guess) - sum(truth)) / sum(truth) * 100
        h_times: list[float] = []
        t_times: list[float] = []
        for _ in range(args.repeat):
            h_times.append(best_time(heuristic.count_text, pieces))
            t_times.append(best_time(exact.count_text, pieces))
        tokens = sum(truth)
        h_rate = tokens / min(h_times)
        t_rate = tokens / min(t_times)
        results[name] = (mape, h_rate, t_rate)
        rows.append(
            (
                name,
                f"{len(text):,}",
                f"{tokens:,}",
                f"{sum(guess):,}",
                f"{mape:.1f}",
                f"{bias:+.1f}",
                f"{h_rate / 1e6:.2f}",
                f"{t_rate / 1e6:.2f}",
            )
        )
    print()
    table(
        rows,
        [
            "sample",
            "chars",
            "o200k tokens",
            "heuristic tokens",
            "MAE % per chunk",
            "total bias %",
            "heuristic Mtok/s",
            "tiktoken Mtok/s",
        ],
    )
    print()
    for name, (mape, h_rate, t_rate) in results.items():
        ratio(f"{name}: heuristic / tiktoken throughput", h_rate / t_rate, f"MAE {mape:.1f}%")


if __name__ == "__main__":
    main()
