"""The policy: who may use which methods and tools on which slots ([policy]; docs/governance.md).

model.py (the file's entries), paths.py (resource patterns), capabilities.py, subjects.py, checking.py
(every mistake listed at once), compiled.py (rules ready to decide), engine.py (Policy), decision.py
(Ask, Decision), explain.py (the CLI's words), loading.py (load_policy).
"""

from gateway.policy.rules.checking import PolicyError
from gateway.policy.rules.decision import Ask, Decision
from gateway.policy.rules.engine import Policy
from gateway.policy.rules.loading import load_policy
from gateway.policy.rules.subjects import subjects_of

__all__ = ["Ask", "Decision", "Policy", "PolicyError", "load_policy", "subjects_of"]
