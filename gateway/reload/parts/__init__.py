"""One module per part of the configuration that can change at run time: what it owns (dotted keys),
how it prepares a change without touching the running gateway, and how it swaps it in."""
