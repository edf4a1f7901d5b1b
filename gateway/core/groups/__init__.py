"""Tool groups: the bridge endpoints /mcp (every enabled group) and /mcp/<group> (one group), and
their built-in tools.

views.py holds what a group is and what one caller sees; catalog.py sorts every ready slot's tools
into the groups and answers at the endpoints; builtin_tools.py serves `guidance` (pages written by
guidance.py) and `search` (ranked by search.py) from the live catalog.
"""
