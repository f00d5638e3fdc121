"""Query servers: Fennel's HTTP API and a GraphQL API over the committed featuresets.

``app.build_app`` is the ASGI application ``fennel-dagster serve`` runs under uvicorn. A server
is stateless: it holds each branch's graph, the engines' routes and the tokens in memory,
refreshed on change by Postgres LISTEN/NOTIFY (``state``), so any number of them can stand
behind a load balancer.
"""
