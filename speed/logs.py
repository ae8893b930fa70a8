"""Structured logs: one JSON object per line on stderr, with the event name and its fields."""

from __future__ import annotations

import logging
import sys
import time

import orjson


class JsonFormatter(logging.Formatter):
    """ts (epoch ms), level, logger, event, and the `fields` passed in `extra`."""

    def format(self, record: logging.LogRecord) -> str:
        doc = {"ts": int(record.created * 1000), "level": record.levelname, "logger": record.name,
               "event": record.getMessage()}
        doc.update(getattr(record, "fields", {}))
        if record.exc_info:
            doc["error"] = self.formatException(record.exc_info)
        return orjson.dumps(doc, default=str).decode()


def setup(name: str) -> logging.Logger:
    """Configure the root logger once for a speed process; return the named logger."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.INFO)
    logging.getLogger("kafka").setLevel(logging.WARNING)
    logging.Formatter.converter = time.gmtime
    return logging.getLogger(name)


def event(log: logging.Logger, name: str, level: int = logging.INFO, **fields) -> None:
    """Log one event with structured fields."""
    log.log(level, name, extra={"fields": fields})
