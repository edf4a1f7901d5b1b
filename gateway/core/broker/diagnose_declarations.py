"""Problems of providers' governance (docs/governance-providers.md), read from the governance status the
policy layer reports (`providers`): decisions whose promised `broker/audit/result` is overdue.

Pure: the status in, problems out.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gateway.core.broker.problems import GatewayView, Problem

SHOWN_PER_SLOT = 3
"""Overdue decisions named in one problem's evidence; the count covers them all."""


def declaration_problems(view: GatewayView) -> list[Problem]:
    governance = view.governance
    providers = governance.get("providers") if isinstance(governance, Mapping) else None
    results = providers.get("results") if isinstance(providers, Mapping) else None
    overdue = results.get("overdue") if isinstance(results, Mapping) else None
    if not isinstance(overdue, list) or not overdue:
        return []
    timeout = results.get("result_timeout_s") if isinstance(results, Mapping) else None
    by_slot: dict[str, list[Mapping[str, Any]]] = {}
    for entry in overdue:
        if isinstance(entry, Mapping):
            by_slot.setdefault(str(entry.get("slot")), []).append(entry)
    problems = []
    for slot, entries in sorted(by_slot.items()):
        named = "; ".join(
            f"{entry.get('decisionId')} ({entry.get('capability')} on {entry.get('resource')}, "
            f"correlationId {entry.get('correlationId')}, {entry.get('age_s')} s ago)"
            for entry in entries[:SHOWN_PER_SLOT]
        )
        more = len(entries) - SHOWN_PER_SLOT
        identity = entries[0].get("identity")
        problems.append(
            Problem(
                "declarations.result_overdue",
                "warning",
                f'Provider "{slot}" has not reported the result of {len(entries)} decision(s) it promised to report',
                f"identity {identity}: no broker/audit/result within {timeout} s for {named}"
                + (f" and {more} more" if more > 0 else ""),
                "The provider lists these capabilities in resultsRequired: after acting on an allowed decision it must "
                'send {"jsonrpc":"2.0","method":"broker/audit/result","params":{"decisionId":"<id>","result":'
                '"success"}} ("failure" or "refused" when it did not act). Fix the provider, or drop the capability '
                "from resultsRequired; raise [providers.declarations] result_timeout_s if the action takes longer.",
                slot,
            )
        )
    return problems
