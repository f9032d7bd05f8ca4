"""The daemon: JSON-RPC 2.0 (protocol 19) over a Unix socket or stdio, and its client."""
