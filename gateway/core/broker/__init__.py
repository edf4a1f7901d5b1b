"""`_broker`: the gateway's own MCP server, describing itself, its providers and what is wrong.

server.py answers its tools and resources; status.py reads the live gateway into plain JSON
(broker_info, provider_status); problems.py, diagnose.py and its diagnose_* rules judge that
snapshot; guide.py and its guide_* pages write Markdown from it; scrape.py copies live state into
/metrics before each scrape. Everything here reads the gateway through view.BrokerView.
"""
