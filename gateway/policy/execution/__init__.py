"""Execution limits and budgets ([[execution_limits]] in the policy; docs/governance-limits.md).

windows.py (sliding windows of bounded memory), rules.py (rules compiled: selectors, group_by),
counters.py (a rule's groups, at most max_keys), debits.py (all matching rules or none),
refusals.py (the -32029 answer, recent refusals), admission.py (ExecutionLimits: tools/call
admission and release, reload, status), ledger.py (budget reservations and settlements), wire.py
(broker/budget/reserve and broker/budget/settle params and results), checks.py (the policy checks).
"""
