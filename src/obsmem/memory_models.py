"""Which models an engine's Observer and Reflector use: ``"auto"`` resolved (once the actor is
known, for good) into the engine's options, and missing credentials looked for without a
network call, with a WARNING once per cause (and once when they are there).
"""

from __future__ import annotations

import logging
from dataclasses import replace

from .cycles import Deps
from .failures import advice
from .models import ModelSpec
from .models.environment import LOCAL_PLACEHOLDER, AutoModel, resolve_auto, served_choice
from .models.providers import credentials_problem
from .models.specs import AUTO
from .outcomes import Outcomes

__all__ = ["MemoryModels"]

log = logging.getLogger("obsmem")


class MemoryModels:
    """The memory models of one engine: what ``"auto"`` chose and what credentials lack."""

    def __init__(self, deps: Deps, outcomes: Outcomes) -> None:
        self._deps = deps
        self._outcomes = outcomes
        options = deps.options
        self.choice: AutoModel | None = None
        """What ``"auto"`` resolved to (None while unresolved, or when models were given)."""
        self._auto_roles = {
            role
            for role, model in (
                ("observation", options.observation.model),
                ("reflection", options.reflection.model),
            )
            if model == AUTO
        }
        self._final = not self._auto_roles
        self.credentials: str | None = None
        """What credentials the memory models lack (None when none is missing)."""
        self._credentials_checked = False

    def settle(self, actor_model: ModelSpec | None) -> None:
        """Resolve ``"auto"`` for the Observer and Reflector (once the actor is known, for good)
        and look for missing credentials without a network call: a WARNING (or, with
        ``failure_policy="raise"``, the turn's error) names the key to set."""
        deps = self._deps
        choice = self.choice if self._final else resolve_auto(actor_model)
        if choice is not None and choice.model == LOCAL_PLACEHOLDER:
            choice = self._served(choice)
        if choice is not None and choice != self.choice:
            obs, ref = deps.options.observation, deps.options.reflection
            chosen = replace(
                deps.options,
                observation=replace(obs, model=choice.model)
                if "observation" in self._auto_roles
                else obs,
                reflection=replace(ref, model=choice.model)
                if "reflection" in self._auto_roles
                else ref,
            )
            deps.options = chosen
            deps.config = chosen.snapshot()
            self._credentials_checked = False
            self.choice = choice
        if actor_model is not None or (
            self.choice is not None and self.choice.why == "OBSMEM_MODEL"
        ):
            self._final = True
        if self._credentials_checked and self.credentials is None:
            return
        self._credentials_checked = True
        problems = {
            credentials_problem(model)
            for model in (deps.options.observer_model, deps.options.reflector_model)
        }
        was = self.credentials
        self.credentials = "; ".join(sorted(p for p in problems if p)) or None
        if self.credentials is not None:
            self._outcomes.warn_once(("*", "credentials"), self.credentials, self.message())
        elif was is not None:
            self._outcomes.warned.pop(("*", "credentials"), None)
            log.warning("obsmem: the memory models' credentials are there now")

    def _served(self, choice: AutoModel) -> AutoModel:
        """``choice`` naming the model the server serves in place of the placeholder, once the
        caller has asked it (at the first memory model call)."""
        served = getattr(self._deps.caller, "served_in_place_of_placeholder", None)
        if not isinstance(served, str) or served == LOCAL_PLACEHOLDER:
            return choice
        return served_choice(served)

    def message(self) -> str:
        """What the missing credentials stop, and how to fix it."""
        how = (
            f" (model 'auto': {self.choice.model}, {self.choice.why})"
            if self.choice is not None
            else ""
        )
        return (
            f"obsmem: observational memory cannot work{how}: {self.credentials}. Until then "
            "the conversation is kept raw (the oldest messages are left out past block_after). "
            + advice(self.credentials or "")
        )
