"""Trace parsers: one per source, all producing `TraceRequest`s."""

from .loader import NAMED_TRACES, TraceNotFoundError, default_traces_dir, load_trace
from .model import SyntheticPrompt, ToolCall, ToolFunction, Trace, TraceMessage, TraceRequest
from .synthetic import render_synthetic

__all__ = [
    "NAMED_TRACES",
    "SyntheticPrompt",
    "ToolCall",
    "ToolFunction",
    "Trace",
    "TraceMessage",
    "TraceNotFoundError",
    "TraceRequest",
    "default_traces_dir",
    "load_trace",
    "render_synthetic",
]
