"""The audit trail: every governed decision and its result, durable in SQLite before the call goes on."""

from gateway.policy.audit.errors import AuditSchemaError, AuditUnavailable
from gateway.policy.audit.location import audit_path, default_audit_path
from gateway.policy.audit.reading import AuditReadError, read_records
from gateway.policy.audit.records import DecisionRecord, ResultRecord
from gateway.policy.audit.trail import AuditTrail

__all__ = [
    "AuditReadError",
    "AuditSchemaError",
    "AuditTrail",
    "AuditUnavailable",
    "DecisionRecord",
    "ResultRecord",
    "audit_path",
    "default_audit_path",
    "read_records",
]
