"""An OpenAI Agents SDK approval flow on observational memory: the run pauses on a tool call
that needs a person's approval, its state is saved, and a later process resumes it.

Runs offline as it is: the agent's model is scripted (``agents.testing.ScriptedModel``) and so
are memory's Observer and Reflector (``obsmem.testing``). For the real thing, give the Agent
your model and the Memory ``observational_memory={"model": ...}``. Needs ``pip install
"obsmem[openai-agents]"``; the memory lives in ./obsmem.db, the paused run in ./pending-run.json.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

try:
    from agents import Agent, RunConfig, Runner, RunState, function_tool
    from agents.testing import ScriptedModel, assistant_message, function_call

    from obsmem.integrations.openai_agents import ObservationalSession
except ImportError as exc:
    print(
        f"This example needs the OpenAI Agents SDK ({exc.name}): "
        'pip install "obsmem[openai-agents]"',
        file=sys.stderr,
    )
    raise SystemExit(2) from None

from obsmem import Memory
from obsmem.messages import ToolResultPart
from obsmem.stores import SQLiteStore
from obsmem.testing import scripted_observer, scripted_reflector

PENDING = Path("pending-run.json")
OFFLINE = True
"""Tracing off: this demo sends nothing anywhere. With tracing on (the SDK's default),
memory's cycles show up in each run's trace as ``obsmem.*`` spans."""


@function_tool(needs_approval=True)
def delete_file(path: str) -> str:
    """Delete a file (a person approves each call)."""
    return f"{path} is deleted"


def open_memory() -> Memory:
    return Memory(
        SQLiteStore("obsmem.db"),
        observational_memory={
            "observation": {"model": scripted_observer(), "messageTokens": 300},
            "reflection": {"model": scripted_reflector()},
        },
    )


def files_agent(model: ScriptedModel) -> Agent[None]:
    return Agent(
        name="files", instructions="Manage the user's files.", model=model, tools=[delete_file]
    )


def session_of(memory: Memory) -> ObservationalSession:
    return ObservationalSession(memory, session_id="files-chat", resource="user-123")


async def ask() -> str:
    """The first process: the run stops at the call that waits for approval; its state, to
    save."""
    async with session_of(open_memory()) as session:
        model = ScriptedModel(
            [[function_call("delete_file", {"path": "old-report.txt"}, call_id="call-1")]]
        )
        config = RunConfig(
            call_model_input_filter=session.call_model_input_filter, tracing_disabled=OFFLINE
        )
        paused = await Runner.run(
            files_agent(model), "Please delete old-report.txt.", session=session, run_config=config
        )
        for waiting in paused.interruptions:
            print(f"Paused: {waiting.tool_name}({waiting.arguments}) waits for approval.")
        return paused.to_state().to_string()


async def approve(saved: str) -> None:
    """A later process: load the run, approve the call, resume on the same session id."""
    memory = open_memory()
    async with session_of(memory) as session:
        model = ScriptedModel([[assistant_message("I deleted old-report.txt.")]])
        agent = files_agent(model)
        state = await RunState.from_string(agent, saved)
        for waiting in state.get_interruptions():
            state.approve(waiting)
        config = RunConfig(
            call_model_input_filter=session.call_model_input_filter, tracing_disabled=OFFLINE
        )
        done = await Runner.run(agent, state, session=session, run_config=config)
        print(f"Approved. Agent: {done.final_output}")
        stored = await memory.messages(session.ref.thread)
        names = [p.tool_name for m in stored for p in m.parts if isinstance(p, ToolResultPart)]
        print(f"Memory stored the result of: {', '.join(names)}")


def main() -> int:
    PENDING.write_text(asyncio.run(ask()))
    print(f"Saved the run to {PENDING}.")
    # ... later, maybe in another process, once a person said yes:
    asyncio.run(approve(PENDING.read_text()))
    PENDING.unlink()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
