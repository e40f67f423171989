"""A corpus of realistic Observer answers and what a careful reader expects the parser to keep.

Each file in ``tests/fixtures/model_outputs/`` is one answer, byte for byte, in a shape real
models send: code fences, reasoning blocks, prose around the tags, other date and bullet styles,
cut-off answers, CRLF, JSON, resource-scope thread blocks, loops, and observations written
outside the tags (after an empty block, after the closing tag, a date header above it).
:data:`EXPECTED` says, per file, which facts must survive
:func:`~obsmem.answers.parse_output`, what must not (reasoning, prose, fence and tag
debris), the hints, the thread blocks and the :func:`is_degenerate` verdict.
Every file needs an entry, so a new case cannot go untested.

Where a choice is debatable the expectation is the conservative one: text priority markers
(``[HIGH]``, ``:red_circle:``, ``✔️``) are kept as written, not mapped to emojis; a hint cut off
before its closing tag is dropped rather than kept half-written; markdown headings standing in
for hint tags are not read as hints.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from obsmem.answers import ParsedOutput, parse_output
from obsmem.observations import is_degenerate

CORPUS = Path(__file__).parent / "fixtures" / "model_outputs"


@dataclass(frozen=True, kw_only=True)
class Expect:
    """What a careful reader takes from one corpus file."""

    keep: tuple[str, ...] = ()
    """Substrings the observations must contain (the facts)."""
    drop: tuple[str, ...] = ()
    """Substrings the log (observations and thread blocks) must not contain."""
    nowhere: tuple[str, ...] = ()
    """Substrings found nowhere in the result, hints included (reasoning)."""
    lines: tuple[str, ...] = ()
    """Whole lines the observations must contain (canonical ``Date:`` headers)."""
    current_task: str | None = None
    suggested_response: str | None = None
    thread_title: str | None = None
    threads: Mapping[str, tuple[str, ...]] = field(default_factory=dict[str, tuple[str, ...]])
    """Resource scope: the thread ids expected, each with substrings its block must contain."""
    thread_tasks: Mapping[str, str] = field(default_factory=dict[str, str])
    """The ``current_task`` of a thread block."""
    resource_scope: bool = False
    """Parse with ``multi_thread=True`` (the Observer shown several threads)."""
    empty: bool = False
    well_formed: bool | None = None
    """For an empty answer: whether it is in the format (a closed ``<observations>`` block),
    which for small talk means nothing was worth noting, not a failure."""
    degenerate: bool = False
    fences: bool = False
    """Code-fence lines belong to the observations (a snippet the user approved)."""


EXPECTED: dict[str, Expect] = {
    # ---- code fences -------------------------------------------------------------------------
    "code_fence_xml.txt": Expect(
        keep=(
            "* 🔴 (14:30) User stated their sister Ana lives in Porto and visits every March.",
            "  * -> assistant suggested cursor-based pagination with a `next_cursor` field",
            "* ✅ (14:40) Alembic migration 0042 fixed",
        ),
        lines=("Date: Dec 4, 2025",),
        current_task="Primary: Add cursor-based pagination to `GET /invoices`.",
        suggested_response="Show the endpoint with `next_cursor` and ask whether the page size "
        "should be configurable.",
        thread_title="FastAPI invoice pagination",
    ),
    "code_fence_plain.txt": Expect(
        keep=('called "Brood & Zo"', "`=SUMIFS(C:C, A:A, F2, B:B, G1)`"),
        drop=("Here is the updated memory",),
        current_task="Help the user build a daily sales sheet.",
    ),
    "code_fence_markdown.txt": Expect(
        keep=("vegetarian and dislike mushrooms", "under 2,000 kcal", "cook mostly on weekends"),
        lines=("Date: Dec 5, 2025",),
        drop=("markdown",),
    ),
    "code_fence_inside_observations.txt": Expect(
        keep=("cat Miso needs insulin twice a day", "supports two daily alarms"),
        lines=("Date: Jan 12, 2026",),
        current_task="Recommend a reminder app for the cat's insulin schedule.",
    ),
    "code_fence_unclosed_observations.txt": Expect(
        keep=("AWS Solutions Architect exam on Mar 14, 2026", "6-week study plan"),
        lines=("Date: Feb 3, 2026",),
    ),
    "observation_with_code_snippet.txt": Expect(
        keep=(
            "* 🟡 (15:10) User approved this retry helper for the payments client:\n"
            "  ```python\n  def retry(fn, attempts=3):",
            "                  raise\n  ```\n* ✅ (15:25) Retry helper merged",
        ),
        fences=True,
    ),
    # ---- missing </observations> -------------------------------------------------------------
    "missing_close_with_hints.txt": Expect(
        keep=("€1,400 at most", "  * -> user cares most about battery life and Linux support"),
        drop=("Primary: Compare", "dedicated GPU"),
        current_task="Primary: Compare the two laptops on battery life and Linux support.",
        suggested_response="Give a short side-by-side comparison and ask whether the user needs "
        "a dedicated GPU.",
    ),
    "missing_close_no_hints.txt": Expect(
        keep=(
            "moved from Madrid to Valencia last week (meaning Oct 23, 2025)",
            "* ✅ (21:20) Assistant listed the documents needed: NIE, empadronamiento "
            "certificate, passport.",
        ),
    ),
    "missing_close_trailing_prose.txt": Expect(
        keep=("Berlin half marathon on Apr 5, 2026", "add one interval session"),
        drop=("Let me know", "these notes"),
    ),
    "missing_close_uppercase_hint.txt": Expect(
        keep=("prefer answers in Portuguese", "translate their CV summary"),
        drop=("European Portuguese", "Return the translation"),
        current_task="Translate the CV summary into European Portuguese.",
        suggested_response="Return the translation and ask whether the tone should be formal.",
    ),
    "missing_open_tag.txt": Expect(
        keep=("1930s terraced house in Bristol", "lime plaster is needed on solid brick walls"),
        lines=("Date: Jan 10, 2026",),
        current_task="Explain lime versus gypsum plaster for solid walls.",
    ),
    # ---- reasoning blocks --------------------------------------------------------------------
    "think_block.txt": Expect(
        keep=("(meaning Jun 20, 2026)", "dislike country music", "40-song reception playlist"),
        nowhere=("Okay, let me look", "Hmm, wait", "So the key facts", "June 2026 starts"),
        current_task="Build a 40-song wedding reception playlist without country music.",
    ),
    "think_block_fake_observations.txt": Expect(
        keep=(
            "* 🔴 (14:30) User corrected that their sister Ana lives in Porto, not Lisbon.",
            "trains from Lisbon to Porto on Dec 19, 2025",
        ),
        nowhere=("Ana lives in Lisbon.", "draft:", "No wait", "Let me draft"),
        current_task="Find trains from Lisbon to Porto on Dec 19, 2025.",
    ),
    "thinking_tag.txt": Expect(
        keep=("only write TypeScript", "`POST_NOTIFICATIONS` permission", "* ✅ (13:20)"),
        nowhere=("The conversation covers", "functional components", "I'll record"),
        thread_title="Android 14 startup crash",
    ),
    "think_block_no_tags.txt": Expect(
        keep=("paediatric nurse at a hospital in Rotterdam", "packed-lunch plan"),
        lines=("Date: Jan 9, 2026",),
        nowhere=("Facts to keep", "- user is a nurse", "- works in Rotterdam"),
    ),
    "think_orphan_close.txt": Expect(
        keep=("Raspberry Pi 5 (8 GB) running Debian 12", "Nextcloud with Docker Compose"),
        nowhere=("User has a Raspberry Pi.", "First draft", "too vague", "Okay, I need"),
        current_task="Set up Nextcloud with Docker Compose behind Caddy on the Pi.",
        suggested_response="Give the docker-compose.yml and Caddyfile, then ask for the domain "
        "name.",
    ),
    "think_orphan_close_no_tags.txt": Expect(
        keep=("dog Biscuit is a 4-year-old beagle", "(meaning Nov 7, 2025)"),
        lines=("Date: Nov 3, 2025",),
        nowhere=("dog's name is Biscuit", "- the vet appointment", "Let me format"),
    ),
    "think_unclosed_truncated.txt": Expect(empty=True, nowhere=("penicillin", "Let me go through")),
    # ---- prose around the answer ------------------------------------------------------------
    "prose_around_tags.txt": Expect(
        keep=("chemistry teacher in Leeds", 'sodium thiosulfate "disappearing cross"'),
        drop=("Sure!", "Here are the observations", "Let me know"),
        current_task="Primary: Write a worksheet for the sodium thiosulfate experiment.",
        suggested_response="Share the worksheet draft and ask how long the lesson is.",
    ),
    "markdown_headings_instead_of_tags.txt": Expect(
        # Conservative: headings are not hint tags; their prose is neither a hint nor a fact.
        keep=("switching careers from accounting to data analysis", "which SQL course"),
        lines=("Date: Jan 5, 2026",),
        drop=("## Observations", "Recommend an SQL course", "Suggest two courses"),
    ),
    # ---- date header styles -----------------------------------------------------------------
    "date_bold_no_tags.txt": Expect(
        keep=(
            "starts university in Utrecht in September 2026",
            "student housing waiting lists",
            "-> assistant estimated €600–€900 per month",
        ),
        lines=("Date: Dec 4, 2025", "Date: Dec 5, 2025"),
        drop=("**", "Here's a summary"),
    ),
    "date_bold_label.txt": Expect(
        keep=("bass in a jazz trio", "ii-V-I in B-flat"),
        lines=("Date: Dec 8, 2025",),
        drop=("**",),
    ),
    "date_markdown_heading.txt": Expect(
        keep=("10-day trip to Japan in April 2026", "* ✅ (09:10) User booked the Tokyo hotel"),
        lines=("Date: Dec 4, 2025", "Date: Dec 6, 2025"),
        drop=("##",),
        current_task="Plan the Kyoto leg of the Japan trip.",
    ),
    "date_iso.txt": Expect(
        keep=("GitLab CI, not GitHub Actions", "`cache: paths: [.cache/pip]`"),
        lines=("Date: Dec 4, 2025", "Date: Dec 5, 2025"),
        drop=("2025-12-04", "2025-12-05"),
    ),
    "date_long_ordinal.txt": Expect(
        keep=("left-handed guitar", "under $300"),
        lines=("Date: Dec 4, 2025", "Date: Dec 5, 2025"),
        drop=("December 4th", "December 5th"),
        thread_title="Left-handed guitar shopping",
    ),
    "date_weekday_heading.txt": Expect(
        keep=("- 🔴 (14:30) User stated they are lactose intolerant.", "without dairy"),
        lines=("Date: Dec 4, 2025",),
        drop=("###", "Thursday"),
    ),
    "date_day_month.txt": Expect(
        keep=("14 km each way in Manchester", "waterproof trousers"),
        lines=("Date: Dec 4, 2025",),
        drop=("4 December 2025",),
    ),
    # ---- bullet styles (kept as written) ----------------------------------------------------
    "bullets_dash.txt": Expect(
        keep=(
            "- 🔴 (15:00) User stated they manage a team of 6 backend engineers.",
            "  - -> assistant shared a 5-section template",
            "- ✅ (15:20) User adopted the template",
        ),
        lines=("Date: Dec 10, 2025",),
    ),
    "bullets_unicode_dot.txt": Expect(
        keep=(
            "• 🔴 (08:30) User stated they are learning Japanese and passed JLPT N4",
            "• 🟡 (08:33) User asked for a daily Anki routine",
            "  ◦ -> assistant suggested doing reviews first, then new cards",
        ),
        lines=("Date: Dec 11, 2025",),
    ),
    "bullets_numbered.txt": Expect(
        keep=(
            "1. 🔴 (17:00) User stated their startup's runway is 9 months.",
            "   - -> assistant recommended a 12-slide deck and a data room",
            "3. 🟢 (17:10) User mentioned they use Notion",
        ),
        lines=("Date: Dec 12, 2025",),
    ),
    "bullets_nested_tabs.txt": Expect(
        keep=(
            "\t* -> pprof shows `bytes.Buffer` growth in `encodeResponse`",
            "\t\t* -> buffers are pooled but never reset",
            "    * -> heap grows about 40 MB per hour",
            "* ✅ (11:45) Leak fixed by calling `buf.Reset()`",
        ),
        lines=("Date: Dec 15, 2025",),
    ),
    "bullets_checkbox.txt": Expect(
        keep=(
            "- [ ] 🔴 (09:10) User needs to renew their passport",
            "- [x] ✅ (09:15) User booked the passport appointment for Jan 8, 2026.",
            "- [ ] 🟡 (09:20) User asked which photo sizes are accepted.",
        ),
        lines=("Date: Dec 16, 2025",),
    ),
    # ---- priority markers (kept as written; no priority is invented) ------------------------
    "emoji_variation_selector.txt": Expect(
        keep=(
            "* 🔴\ufe0f (10:00) User stated they are colour-blind (deuteranopia).",
            "* 🟡\ufe0f (10:05)",
            "* ✔️ (10:20) Palette chosen: blue #0072B2",
            "* ☑️ (10:22) User exported the palette",
            "* ⚠️ (10:25) User noted the legend still uses red and green.",
        ),
        drop=("✅",),
    ),
    "priority_text_markers.txt": Expect(
        keep=(
            "* [HIGH] (13:00) User stated they have type 1 diabetes.",
            "* [MEDIUM] (13:04)",
            "* (red) (13:05) User said they cannot eat shellfish.",
            "* [LOW] (13:07)",
            "* [DONE] (13:15) Assistant sent five dinner recipes",
        ),
        drop=("🔴", "🟡", "🟢", "✅"),
    ),
    "emoji_shortcodes.txt": Expect(
        keep=(
            "* :red_circle: (16:00) User stated their company's fiscal year ends on Mar 31.",
            "* :white_check_mark: (16:30) Template delivered",
        ),
        drop=("🔴", "✅"),
    ),
    # ---- hints -------------------------------------------------------------------------------
    "hints_inside_observations.txt": Expect(
        keep=("new flat on Jan 15, 2026", "packing checklist for a one-bedroom flat"),
        drop=("Primary: Write", "Offer the checklist", "Moving checklist"),
        current_task="Primary: Write a packing checklist for a one-bedroom move.",
        suggested_response="Offer the checklist grouped by room.",
        thread_title="Moving checklist",
    ),
    "hints_uppercase_attrs.txt": Expect(
        keep=("Dutch at home and English at work", "bilingual bedtime story"),
        current_task="Primary: Write a short bilingual Dutch/English bedtime story.",
        suggested_response="Tell the story, alternating one Dutch and one English sentence.",
        thread_title="Bilingual bedtime story",
    ),
    "hints_attrs_inside_observations.txt": Expect(
        keep=("fails about 1 run in 5", "CI green before the release on Jan 16, 2026"),
        drop=("priority=", "Find the cause", "failing job log"),
        current_task="Find the cause of the flaky `integration-tests` job.",
        suggested_response="Ask for the failing job log and the Postgres service definition.",
    ),
    "observations_uppercase_tag.txt": Expect(
        keep=(
            "started weightlifting in November 2025",
            "3-day full-body program;\n  they can train Mon, Wed and Fri for 60 minutes each.",
        ),
        lines=("Date: Jan 2, 2026",),
        current_task="Design a 3-day full-body lifting program.",
    ),
    "indented_pretty_xml.txt": Expect(
        keep=(
            "freelance translator working from German to English",
            '"VAT reverse charge, Article 196 Directive 2006/112/EC"',
        ),
        current_task="Help the user draft an invoice template with the reverse-charge note.",
    ),
    # ---- cut-off answers ---------------------------------------------------------------------
    "truncated_mid_line.txt": Expect(
        keep=(
            "thesis on coral bleaching in the Red Sea",
            "NOAA Coral Reef Watch data in APA 7",
            # the cut line is kept as far as it goes: a partial fact, not debris
            "(09:12) User asked whether satellite SST data from 1985 onward",
        ),
    ),
    "truncated_mid_close_tag.txt": Expect(
        keep=("raised the rent by 12% from Feb 1, 2026", "Scottish private residential tenancy."),
        lines=("Date: Dec 23, 2025",),
    ),
    "truncated_mid_open_tag.txt": Expect(empty=True, drop=("Sure, here are",)),
    "truncated_mid_hint_tag.txt": Expect(
        keep=("raised the rent by 12%", "dispute the increase with the rent service"),
        drop=("suggested-resp", "Primary: Draft"),
        current_task="Primary: Draft an email to the landlord disputing the increase.",
    ),
    "truncated_inside_hint.txt": Expect(
        # Conservative: a hint cut before its closing tag is not used half-written.
        keep=("nightly jobs off the old VM by Jan 31, 2026", "14 cron jobs"),
        drop=("Primary: Migrate", "CronJ"),
    ),
    # ---- empty and unusable answers ----------------------------------------------------------
    "empty_observations.txt": Expect(
        empty=True,
        well_formed=True,
        current_task="Primary: Waiting for the user to share the error log.",
        suggested_response="Ask the user to paste the full stack trace.",
    ),
    "empty_observations_inline.txt": Expect(
        empty=True, well_formed=True, drop=("No new information",)
    ),
    "refusal.txt": Expect(empty=True, well_formed=False, drop=("sorry",)),
    "refusal_cannot_help.txt": Expect(
        empty=True, well_formed=False, drop=("cannot help", "medical")
    ),
    "date_header_only.txt": Expect(
        empty=True, well_formed=True, current_task="Chat with the user."
    ),
    "date_headers_only_untagged.txt": Expect(empty=True, well_formed=False),
    # ---- line endings ------------------------------------------------------------------------
    "crlf_line_endings.txt": Expect(
        keep=(
            "* 🔴 (10:30) User stated they work night shifts as an ICU nurse.\n* 🟡 (10:34)",
            "  * -> assistant suggested anchor sleep 08:30-14:30",
        ),
        lines=("Date: Dec 26, 2025",),
        current_task="Primary: Build a sleep plan around 3 night shifts.\n"
        "Secondary: Suggest caffeine cut-off times.",
        thread_title="Night shift sleep plan",
    ),
    "crlf_no_tags.txt": Expect(
        keep=("live in Reykjavik", "  * -> assistant suggested f/2.8, ISO 1600"),
        lines=("Date: Dec 27, 2025",),
        drop=("Here are the notes",),
    ),
    # ---- JSON instead of the tag format ------------------------------------------------------
    "json_answer.txt": Expect(
        keep=(
            "🔴 (15:00) User stated they are saving for a house deposit of £30,000 by 2027.",
            "🟡 (15:05) User asked how the Lifetime ISA bonus works.",
            "  * -> assistant explained the 25% government bonus, up to £1,000 per year",
        ),
        lines=("Date: Dec 27, 2025",),
        drop=('"observations"', "{", '",'),
        current_task="Explain Lifetime ISA rules for a first-time buyer.",
        suggested_response="Summarise the withdrawal penalty and ask about the purchase price.",
    ),
    "json_observations_string.txt": Expect(
        keep=("* 🔴 (11:00) User stated they are allergic to latex.", "latex-free glove brands"),
        lines=("Date: Dec 28, 2025",),
        drop=('"observations"', "{"),
        current_task="Recommend latex-free gardening gloves.",
        thread_title="Latex-free gloves",
    ),
    # ---- resource scope: thread blocks -------------------------------------------------------
    "threads_single_quotes.txt": Expect(
        resource_scope=True,
        threads={
            "thread-a1": ("allergic to peanuts",),
            "thread-b2": ("trains from Lyon to Geneva",),
        },
        thread_tasks={"thread-a1": "Plan a peanut-free dinner menu."},
    ),
    "threads_unquoted.txt": Expect(
        resource_scope=True,
        threads={"t1": ("keep kosher",), "t2": ("renew a library card",)},
    ),
    "threads_extra_attributes.txt": Expect(
        resource_scope=True,
        threads={"t1": ("hosting 8 guests on Dec 13, 2025",), "t2": ("Utrecht to Amsterdam",)},
        thread_tasks={"t1": "Plan the dinner party menu."},
        drop=("Dinner party",),
    ),
    "threads_wrong_case.txt": Expect(
        resource_scope=True,
        threads={"T1": ("need step-free routes",), "t2": ("vegan birthday cake",)},
    ),
    "threads_missing_tags.txt": Expect(
        # No block to tell the threads apart: all is kept in the log, no thread is guessed.
        resource_scope=True,
        keep=("guide dog puppy named Pepper", "replacement part for their dishwasher"),
        current_task="Find the dishwasher part.",
    ),
    "threads_unclosed_last.txt": Expect(
        # The block cut off is no thread block: that thread is observed again next cycle.
        resource_scope=True,
        threads={"t1": ("night-owl and do their best work after 22:00",)},
    ),
    "threads_without_observations_wrapper.txt": Expect(
        resource_scope=True,
        threads={"t1": ("partner's birthday is on Dec 30",), "t2": ("descale an espresso",)},
        thread_tasks={"t1": "Pick a birthday gift under €100."},
    ),
    # ---- answers whose observations sit outside the usual shape ------------------------------
    "bullets_en_dash_no_tags.txt": Expect(
        keep=(
            "– 🔴 (18:05) User stated they are training for their first sprint triathlon",
            "  – -> assistant proposed 2 h swim, 2.5 h bike, 1.5 h run",
            "– 🟢 (18:12) User mentioned they own a road bike but no wetsuit yet.",
        ),
        lines=("Date: Jan 20, 2026",),
        drop=("Here are the observations", "I kept the times"),
    ),
    "bullets_em_dash_plus.txt": Expect(
        keep=(
            "— 🔴 (07:40) User stated they are vegan and their partner is allergic to sesame.",
            "  + -> user rejected the tofu stir-fry",
            "— ✅ (07:52) Assistant delivered a 5-dinner plan",
        ),
        lines=("Date: Feb 2, 2026",),
        drop=("**", "Let me know"),
    ),
    "bullets_middle_dot_squares.txt": Expect(
        keep=(
            "· 🔴 (20:15) User stated they run a small pottery studio in Ghent",
            "    ▪ -> assistant suggested a retail price of €38–€45 per mug",
            "· ✅ (20:31) User chose €42 per mug",
        ),
        lines=("Date: Dec 30, 2025",),
        drop=("Sure, here's", "###"),
    ),
    "bullets_lettered_sub_items.txt": Expect(
        keep=(
            "1) 🔴 (10:00) User stated they teach Year 9 history at a school in Cork.",
            "   b) -> user wants the debate cut to 10 minutes",
            "(3) 🟢 (10:11) User mentioned the class has 28 students",
        ),
        lines=("Date: Jan 8, 2026",),
        drop=("Observations (Jan 8, 2026):",),
    ),
    "bullets_triangles_no_space.txt": Expect(
        keep=(
            "▸ 🔴 (19:00) User stated they play cello in a community orchestra in Lyon.",
            "  ‣ -> assistant suggested fresh rosin",
            "►🟢 (19:10) User mentioned their cello",
            "➤✅ (19:15) User fixed the squeak by rehairing the bow.",
        ),
        lines=("Date: Jan 25, 2026",),
        drop=("Observation log update",),
    ),
    "markers_without_bullets.txt": Expect(
        keep=(
            "🔴 (09:30) User stated they were diagnosed with coeliac disease last month",
            "  -> assistant named two places and advised calling ahead",
            "🟢 (09:40) User mentioned they prefer Portuguese food",
            "✅ (09:45) User booked a table for 2 on Jan 17, 2026",
        ),
        lines=("Date: Jan 15, 2026",),
        drop=("Here are the new observations", "These observations cover"),
    ),
    "markers_variation_selector_no_bullets.txt": Expect(
        keep=(
            "🔴\ufe0f (2:15 PM) User stated they are hard of hearing",
            "🟡\ufe0f (2:19 PM) User asked how to turn on live captions",
            "   → assistant explained that the web app supports live captions",
            "✔️ (2:31 PM) User enabled live captions in the Teams web app.",
            "🟢 (2:33 PM) User mentioned their team also uses Zoom on Fridays.",
        ),
        lines=("Date: Feb 9, 2026",),
        drop=("Let me know",),
    ),
    "markers_text_no_bullets.txt": Expect(
        keep=(
            "[HIGH] (16:00) User stated they are moving their family of 4 from Austin to Denver",
            "[MEDIUM] (16:06) User asked for school districts near Denver",
            "[LOW] (16:10) User mentioned they like hiking on weekends.",
            "[DONE] (16:20) Assistant sent a shortlist of three districts",
        ),
        lines=("Date: Jan 27, 2026",),
        drop=("🔴", "✅", "Compare the three"),
        current_task="Compare the three Denver school districts for special education.",
    ),
    "empty_block_then_lines.txt": Expect(
        keep=(
            "* 🔴 (11:20) User stated they are self-employed as a wedding photographer in Leipzig.",
            "  * -> assistant explained the GWG limit of €800",
        ),
        lines=("Date: Jan 19, 2026",),
        drop=("Primary: Explain", "Show the yearly"),
        current_task="Primary: Explain how to depreciate the camera body on the 2025 German tax "
        "return.",
        suggested_response="Show the yearly depreciation amounts and ask when the camera was "
        "bought.",
    ),
    "empty_block_then_bullets_and_hints.txt": Expect(
        keep=(
            "• 🔴 (21:02) User stated their 10-year-old son has ADHD and a 504 plan at school.",
            "  ◦ -> assistant suggested 3 blocks of 12 minutes",
            "• ✅ (21:18) User printed the routine checklist for the fridge.",
        ),
        lines=("Date: Feb 11, 2026",),
        drop=("Primary: Adjust", "Offer a shortened", "ADHD homework routine"),
        current_task="Primary: Adjust the homework routine for days with football practice.",
        suggested_response="Offer a shortened 30-minute version for practice days.",
        thread_title="ADHD homework routine",
    ),
    "mixed_lines_after_close.txt": Expect(
        # Lines after the block that read as observations are kept; a list of remarks about
        # the answer itself is not.
        keep=(
            "* 🟡 (13:14) User asked how to plan a heat-pump retrofit for the whole building.\n"
            "* 🟡 (13:20) User said the building has a shared gas boiler from 2009.\n"
            "  * -> assistant suggested a collective air-to-water system",
            "* ✅ (13:35) User sent the survey results to the owners' association.",
        ),
        lines=("Date: Jan 22, 2026",),
        drop=("Notes:", "I merged", "Times are in", "Draft the heat-pump"),
        current_task="Draft the heat-pump proposal for the owners' association.",
    ),
    "mixed_date_header_outside.txt": Expect(
        keep=(
            "Date: Jan 14, 2026\n* 🔴 (08:05) User stated they are a night-shift paramedic",
            "  * -> assistant suggested the main meal before the shift",
        ),
        lines=("Date: Jan 14, 2026",),
        drop=("**",),
        current_task="Write a 7-day meal plan for night shifts.",
    ),
    "mixed_second_day_after_close.txt": Expect(
        keep=(
            "* 🔴 (17:40) User stated they are learning to sail",
            "Date: Dec 5, 2025\n* 🟡 (09:02) User said they will sail with 3 friends",
            "* ✅ (09:20) Assistant compared a Bavaria 37 and a Sun Odyssey 389",
        ),
        lines=("Date: Dec 4, 2025", "Date: Dec 5, 2025"),
        drop=("Sure!", "Let me know", "Help the user book"),
        current_task="Help the user book a charter yacht for September 2026.",
        thread_title="Croatia sailing charter",
    ),
    "threads_empty_wrapper_then_blocks.txt": Expect(
        resource_scope=True,
        threads={
            "t-7f3a": ("▪ 🔴 (10:00) User stated they are colour-blind (protanopia)",),
            "t-91bc": ("▪ ✅ (11:22) User exported the dashboard",),
        },
        thread_tasks={"t-7f3a": "Pick an accessible palette for the risk dashboard."},
    ),
    "threads_one_outside_wrapper.txt": Expect(
        resource_scope=True,
        threads={
            "thread-42": ("– 🔴 (14:00) User stated they are allergic to penicillin",),
            "thread-57": (
                "– 🟡 (16:30) User asked how to repot a fiddle-leaf fig in winter.",
                "  – -> assistant advised waiting until spring",
            ),
        },
        thread_tasks={"thread-57": "Explain how to care for the fiddle-leaf fig until spring."},
    ),
    "threads_bare_markers_no_wrapper.txt": Expect(
        resource_scope=True,
        threads={
            "t1": ("🔴 (08:10) User stated they are writing a PhD thesis on Baltic herring",),
            "t2": ("1. 🟡 (09:00) User asked for a 3-day itinerary in Tallinn",),
        },
        drop=("Here are the observations per thread", "<observations/>"),
    ),
    # ---- loops and long lists ----------------------------------------------------------------
    "degenerate_repeated_line.txt": Expect(degenerate=True),
    "degenerate_repeated_block.txt": Expect(degenerate=True),
    "degenerate_phrase_loop.txt": Expect(degenerate=True),
    "degenerate_bare_markers_after_empty_block.txt": Expect(degenerate=True),
    "long_similar_lines_legit.txt": Expect(
        keep=(
            "`pytest tests/test_api.py::test_case_0` after change #100",
            "`pytest tests/test_search.py::test_case_55` after change #155",
            "* ✅ (11:00) All 60 targeted tests pass on branch `fix/pagination`.",
        ),
        lines=("Date: Jan 6, 2026",),
    ),
}

CASES = sorted(p.name for p in CORPUS.iterdir() if p.is_file())

# Tag fragments, reasoning tags and fences never belong in the log.
_DEBRIS = re.compile(r"</?(?:observ|think|current-|suggested-|thread-title)|<[/\w-]*$", re.I | re.M)
_FENCE_LINE = re.compile(r"^\s*```", re.M)


def _read(name: str) -> str:
    return (CORPUS / name).read_bytes().decode("utf-8")


def _everything(parsed: ParsedOutput) -> str:
    """All the text the parser hands on: log, thread blocks and hints."""
    parts = [parsed.observations, *(t.observations for t in parsed.threads.values())]
    for p in (parsed, *parsed.threads.values()):
        parts += [p.current_task or "", p.suggested_response or "", p.thread_title or ""]
    return "\n".join(parts)


def test_corpus_and_table_match() -> None:
    assert CASES, f"no corpus files in {CORPUS}"
    assert sorted(EXPECTED) == CASES, (
        f"files without an expectation: {sorted(set(CASES) - set(EXPECTED))}; "
        f"expectations without a file: {sorted(set(EXPECTED) - set(CASES))}"
    )


@pytest.mark.parametrize("name", CASES)
def test_model_output(name: str) -> None:
    assert name in EXPECTED, f"{name} has no entry in EXPECTED"
    exp = EXPECTED[name]
    text = _read(name)
    assert is_degenerate(text) is exp.degenerate
    parsed = parse_output(text, multi_thread=exp.resource_scope)
    if exp.degenerate:  # a looping answer is discarded before parsing; it must still parse
        return
    obs = parsed.observations

    assert parsed.is_empty is exp.empty
    if exp.well_formed is not None:
        assert parsed.well_formed is exp.well_formed
    for fact in exp.keep:
        assert fact in obs, f"lost: {fact!r}"
    obs_lines = obs.split("\n")
    for line in exp.lines:
        assert line in obs_lines, f"no line {line!r}"
    logs = [obs, *(t.observations for t in parsed.threads.values())]
    for junk in exp.drop:
        assert not any(junk in log for log in logs), f"kept: {junk!r}"
    everything = _everything(parsed)
    for junk in exp.nowhere:
        assert junk not in everything, f"kept: {junk!r}"
    for piece in logs:
        assert "\r" not in piece
        assert (debris := _DEBRIS.search(piece)) is None, f"tag debris {debris[0]!r}"
        if not exp.fences:
            assert _FENCE_LINE.search(piece) is None, "code fence left in the log"

    assert parsed.current_task == exp.current_task
    assert parsed.suggested_response == exp.suggested_response
    assert parsed.thread_title == exp.thread_title
    assert dict(parsed.sections) == {}, "reasoning or prose taken as a section"
    assert dict(parsed.extracted_values) == {}

    assert set(parsed.threads) == set(exp.threads)
    for thread_id, facts in exp.threads.items():
        block = parsed.threads[thread_id]
        for fact in facts:
            assert fact in block.observations, f"thread {thread_id} lost {fact!r}"
        assert block.current_task == exp.thread_tasks.get(thread_id)
        others = [t.observations for k, t in parsed.threads.items() if k != thread_id]
        assert not any(fact in o for fact in facts for o in others), "fact in the wrong thread"


def test_fixtures_are_byte_exact() -> None:
    """The corpus is read as bytes: CRLF and cut-off endings must survive editors and git."""
    for name in ("crlf_line_endings.txt", "crlf_no_tags.txt"):
        raw = (CORPUS / name).read_bytes()
        assert raw.count(b"\r\n") == raw.count(b"\n") > 5, name
    for name in CASES:
        if name.startswith(("truncated_", "think_unclosed")) or name == "threads_unclosed_last.txt":
            assert not _read(name).endswith("\n"), f"{name} should end mid-answer"


def test_verdicts_on_long_answers_are_meaningful() -> None:
    """``is_degenerate`` ignores answers under 2,000 characters: the loop cases and the long
    legitimate list must be longer, or their verdicts would prove nothing."""
    long = [n for n, e in EXPECTED.items() if e.degenerate or n.startswith("long_")]
    assert len(long) >= 4
    for name in long:
        assert len(_read(name)) >= 2000, name
