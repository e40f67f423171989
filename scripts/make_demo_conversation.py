"""Writes src/obsmem/data/demo_conversation.jsonl, the conversation `obsmem demo` replays.

Five sessions over two weeks between a user (Maya) and her assistant: a trip being planned whose
facts change (dates, budget, a city swapped for another), a tool-heavy stretch debugging a
deployment with large logs and search results, a shared image (a floor plan), and small
personal facts that change (a new job, a favorite color). Deterministic: run it again and the
file is byte-identical.

    python scripts/make_demo_conversation.py
"""

from __future__ import annotations

import base64
import json
import random
import struct
import zlib
from datetime import UTC, datetime, timedelta
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "src" / "obsmem" / "data" / "demo_conversation.jsonl"
rng = random.Random(7)
lines: list[dict[str, object]] = []
clock = datetime(2025, 11, 3, 9, 12, tzinfo=UTC)
counter = 0


def stamp(minutes: float) -> str:
    global clock
    clock += timedelta(minutes=minutes)
    return clock.isoformat()


def msg(role: str, parts: list[dict[str, object]], minutes: float = 1.5) -> None:
    global counter
    counter += 1
    lines.append(
        {
            "id": f"demo-{counter:04d}",
            "role": role,
            "parts": parts,
            "created_at": stamp(minutes),
            "metadata": {},
        }
    )


def user(text: str, minutes: float = 2.0) -> None:
    msg("user", [{"kind": "text", "text": text}], minutes)


def assistant(text: str) -> None:
    msg("assistant", [{"kind": "text", "text": text}], 0.6)


def tool(name: str, args: dict[str, object], result: object) -> None:
    call_id = f"call_{counter + 1:04d}"
    msg(
        "assistant",
        [{"kind": "tool-call", "tool_call_id": call_id, "tool_name": name, "args": args}],
        0.3,
    )
    msg(
        "tool",
        [{"kind": "tool-result", "tool_call_id": call_id, "tool_name": name, "content": result}],
        0.2,
    )


def png(width: int, height: int) -> bytes:
    raw = b"".join(
        b"\x00" + bytes(v for x in range(width) for v in (x * 255 // width, y * 255 // height, 160))
        for y in range(height)
    )

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(raw))
        + chunk(b"IEND", b"")
    )


def log_lines(n: int, failing: str) -> str:
    services = ["api", "worker", "scheduler", "billing", "search"]
    out = []
    t = datetime(2025, 11, 5, 14, 0, tzinfo=UTC)
    for i in range(n):
        t += timedelta(seconds=rng.randint(1, 9))
        svc = rng.choice(services)
        level = "ERROR" if (svc == failing and i % 7 == 0) else rng.choice(["INFO"] * 6 + ["WARN"])
        detail = (
            f"connection pool exhausted (size=10, waiting={rng.randint(3, 40)})"
            if level == "ERROR"
            else f"request {rng.randint(10000, 99999)} handled in {rng.randint(3, 900)} ms"
        )
        out.append(f"{t:%H:%M:%S} {level:<5} {svc:<9} {detail}")
    return "\n".join(out)


def search_results(query: str, n: int) -> list[dict[str, str]]:
    topics = [
        "pool sizing",
        "pgbouncer transaction mode",
        "idle timeouts",
        "max_connections",
        "async drivers",
        "connection leaks",
        "retry storms",
        "health checks",
    ]
    return [
        {
            "title": f"{rng.choice(topics).title()} — notes #{i + 1}",
            "url": f"https://docs.example.org/{query.replace(' ', '-')}/{i + 1}",
            "snippet": " ".join(rng.choice(topics) for _ in range(18)),
        }
        for i in range(n)
    ]


# -- session 1: Monday, meeting the user ---------------------------------------------------------
user("Hi! I'm Maya. I just moved to Porto for work. I'm a data engineer at a logistics startup.")
assistant("Welcome to Porto, Maya! Congratulations on the move. How can I help today?")
user(
    "Two things. I'm planning a trip for my parents' 40th anniversary, and I'll need help "
    "with a flaky deployment at work later this week. Let's start with the trip."
)
assistant(
    "Happy to help with both. For the trip: where are you thinking, when, and roughly what budget?"
)
user(
    "Lisbon, the weekend of December 12-14. Budget around 1,800 euros for the three of us. My "
    "mother uses a cane, so nothing with too many stairs. My favorite color is green, by the "
    "way, in case you ever help me pick gifts."
)
assistant(
    "Noted: Lisbon, Dec 12-14, about 1,800 EUR for three, step-free options for your "
    "mother. I'll keep green in mind for gifts."
)
tool(
    "search_hotels",
    {"city": "Lisbon", "check_in": "2025-12-12", "nights": 2, "guests": 3, "accessible": True},
    [
        {"name": n, "price_per_night_eur": p, "elevator": e, "area": a, "rating": r}
        for n, p, e, a, r in [
            ("Casa do Rio", 210, True, "Cais do Sodré", 4.6),
            ("Alfama Terraces", 165, False, "Alfama", 4.8),
            ("Hotel Avenida Leve", 240, True, "Avenida", 4.4),
            ("Graça Garden Suites", 180, True, "Graça", 4.5),
        ]
    ],
)
assistant(
    "Four options. Alfama Terraces has no elevator, so I'd skip it. Casa do Rio (210/night, "
    "riverside, elevator) or Graça Garden Suites (180/night, elevator, quieter) fit best."
)
user("Graça sounds lovely but it's very hilly, isn't it? Let's hold Casa do Rio for now.")
assistant(
    "Good call: Graça is steep. I'll treat Casa do Rio as the working choice, 420 EUR for "
    "two nights."
)
for topic in [
    "dinner with fado",
    "a river cruise",
    "the tram 28 question",
    "pastries",
    "a day trip to Sintra",
    "the Gulbenkian museum",
    "sunset viewpoints",
    "a cooking class",
    "the aquarium",
    "Christmas markets",
    "a photographer",
    "flowers for the anniversary dinner",
]:
    user(f"What do you think about {topic} for them?")
    assistant(
        f"For {topic}: "
        + " ".join(
            rng.choice(
                [
                    "it suits a slow pace",
                    "book ahead on weekends",
                    "choose the riverside option",
                    "avoid the steepest streets",
                    "late afternoon light is best",
                    "keep it under two hours",
                    "there is step-free access at the main entrance",
                ]
            )
            for _ in range(6)
        )
        + "."
    )

# -- session 2: Wednesday, the tool-heavy debugging stretch --------------------------------------
clock += timedelta(days=2, hours=5)
user(
    "OK, work problem. Our order-sync service on Kubernetes keeps restarting since yesterday's "
    "deploy. Can you look at the logs?",
    0,
)
tool("fetch_logs", {"service": "order-sync", "since": "2h"}, log_lines(260, "worker"))
assistant(
    "The worker is exhausting its database connection pool (size 10, up to 40 waiting) "
    "right before each restart. The API looks healthy."
)
user("We bumped replicas from 2 to 6 in that deploy. Could that be it?")
tool(
    "run_sql",
    {"query": "select count(*), state from pg_stat_activity group by state"},
    {"rows": [[212, "idle"], [38, "active"], [31, "idle in transaction"]], "max_connections": 300},
)
assistant(
    "Likely: six replicas times a pool of 10 per process times several processes per pod "
    "adds up to ~280 connections against max_connections=300, and 31 are stuck 'idle in "
    "transaction'."
)
tool(
    "search_docs",
    {"query": "connection pool sizing kubernetes postgres"},
    search_results("connection pool sizing", 14),
)
assistant(
    "Two fixes: put PgBouncer in transaction mode in front of Postgres, and find the "
    "code path that leaves transactions open."
)
tool(
    "grep_repo",
    {"pattern": "session.begin(", "path": "order_sync/"},
    "\n".join(
        f"order_sync/{f}.py:{rng.randint(20, 400)}:    with session.begin():  # "
        f"{rng.choice(['sync', 'retry', 'backfill', 'audit'])}"
        for f in ["sync", "retry", "backfill", "audit", "export", "ingest"] * 6
    ),
)
user(
    "The backfill job opens a transaction and then calls the carrier API inside it. That can "
    "take 30 seconds."
)
assistant(
    "That's the leak: an external HTTP call inside an open transaction holds the connection "
    "'idle in transaction'. Move the API call outside the transaction."
)
tool("fetch_logs", {"service": "order-sync", "since": "15m"}, log_lines(220, "none"))
user("Deployed the fix and PgBouncer. No restarts in 15 minutes. Thank you!")
assistant(
    "Great. Connections are steady and no ERROR lines since the deploy. I'd keep an alert "
    "on 'idle in transaction' above 10."
)

# -- session 3: Friday, the floor plan image and changed facts -----------------------------------
clock += timedelta(days=2, hours=2)
image = base64.b64encode(png(96, 64)).decode("ascii")
msg(
    "user",
    [
        {
            "kind": "text",
            "text": "Here's the floor plan of the apartment we might rent "
            "instead of a hotel. Thoughts on access for my mother?",
        },
        {
            "kind": "image",
            "media_type": "image/png",
            "data": image,
            "filename": "apartment-floorplan.png",
            "width": 96,
            "height": 64,
        },
    ],
    0,
)
assistant(
    "The plan shows a ground-floor entrance, one bedroom off the living room, and a "
    "bathroom with a step at the door. It's workable if the step is small."
)
user(
    "Change of plans, actually: my brother is joining, so we're four people now, and the budget "
    "goes up to 2,400 euros. Also we're switching the dates to December 19-21."
)
assistant(
    "Updated: four travellers, 2,400 EUR, December 19-21. I'll recheck availability for "
    "the new dates."
)
tool(
    "search_hotels",
    {"city": "Lisbon", "check_in": "2025-12-19", "nights": 2, "guests": 4, "accessible": True},
    [
        {"name": "Casa do Rio", "price_per_night_eur": 260, "rooms_left": 0},
        {"name": "Hotel Avenida Leve", "price_per_night_eur": 290, "rooms_left": 2},
        {
            "name": "Apartment Estrela (the floor plan)",
            "price_per_night_eur": 230,
            "rooms_left": 1,
            "elevator": True,
        },
    ],
)
assistant(
    "Casa do Rio is sold out for the 19th. The Estrela apartment from your floor plan is "
    "available at 230/night; Avenida Leve has rooms at 290."
)
user(
    "Book the Estrela apartment. And forget what I said about green, I've been into deep blue "
    "lately, so blue for gifts."
)
assistant("Booked Estrela for Dec 19-21 (460 EUR). Noted: your favorite color is now deep blue.")
for i in range(14):
    user(
        f"Small question {i + 1}: "
        + rng.choice(
            [
                "is the airport metro step-free?",
                "how early should we be at the Belém tower?",
                "is December rainy in Lisbon?",
                "can we bring a folding wheelchair on the tram?",
                "what's a good anniversary restaurant near Estrela?",
                "do we need to tip?",
            ]
        )
    )
    assistant(
        " ".join(
            rng.choice(
                [
                    "Yes, with elevators at each end.",
                    "Go before 10 am to avoid queues.",
                    "Expect some rain; pack light jackets.",
                    "Folding wheelchairs are allowed.",
                    "Try a quiet place with a set menu.",
                    "Rounding up is customary.",
                ]
            )
            for _ in range(3)
        )
    )

# -- session 4: the next Tuesday, a new job and a reminder ---------------------------------------
clock += timedelta(days=4, hours=1)
user(
    "Big news: I accepted an offer from a climate-tech company in Lisbon. I start January 12. "
    "So I'm moving again, this time to Lisbon.",
    0,
)
assistant(
    "Congratulations, Maya! A climate-tech role in Lisbon starting January 12. That also "
    "makes the December trip a scouting visit."
)
user("Exactly. Can you remind me what we decided about the trip so far?")
assistant(
    "Four travellers, December 19-21, budget 2,400 EUR, the Estrela apartment booked "
    "(step-free, 460 EUR), and ideas: fado dinner, river cruise, pastries."
)
tool("fetch_logs", {"service": "order-sync", "since": "7d"}, log_lines(180, "none"))
tool("fetch_logs", {"service": "billing", "since": "24h"}, log_lines(240, "billing"))
user("Hmm, billing shows pool errors too. Same cause?")
tool(
    "grep_repo",
    {"pattern": "requests.post(", "path": "billing/"},
    "\n".join(
        f"billing/{f}.py:{rng.randint(20, 400)}:    resp = requests.post(url, json=payload)"
        for f in ["invoice", "refund", "ledger", "webhook"] * 8
    ),
)
assistant(
    "Same pattern: the refund job posts to the payment provider inside a transaction. "
    "Moving the call out fixes it, as with order-sync."
)
user("Also, last check on work before I leave: is order-sync still stable?")
assistant("Seven days of logs with no restarts and no pool errors. The fix held.")

# -- session 5: two weeks later, after the trip ---------------------------------------------------
clock += timedelta(days=9, hours=3)
user(
    "We're back from Lisbon. My parents loved it. The apartment worked perfectly for my mother.", 0
)
assistant("Wonderful! I'm glad the step-free apartment worked out.")
user("What color should I pick for the thank-you cards?")
assistant("Deep blue, your current favorite.")
user("And remind me when my new job starts and where?")
assistant("January 12, at the climate-tech company in Lisbon.")

OUT.parent.mkdir(parents=True, exist_ok=True)
with OUT.open("w", encoding="utf-8") as f:
    for line in lines:
        f.write(json.dumps(line, ensure_ascii=False) + "\n")
print(f"wrote {len(lines)} messages to {OUT}")
