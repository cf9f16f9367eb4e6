"""Switchable defects, each reproducing a real class of PD serving bug.

They are switched on by name in ``PDSIM_DEFECTS`` (comma-separated). The kill matrix
runs the suites once per defect: every one must make at least one test fail.
"""

from __future__ import annotations

import enum
import os

__all__ = ["Defect", "defects_from_env", "parse_defects"]


class Defect(enum.Enum):
    """The closed set of defects; the value is the name used in ``PDSIM_DEFECTS``."""

    NO_BOOTSTRAP_TIMEOUT = "no_bootstrap_timeout"
    NO_INFLIGHT_WATCHDOG = "no_inflight_watchdog"
    IDLE_WATCHDOG = "idle_watchdog"
    LEAK_ON_ABORT = "leak_on_abort"
    NO_ABORT_TO_DECODE = "no_abort_to_decode"
    STALE_BOOTSTRAP_CACHE = "stale_bootstrap_cache"
    STUCK_TRANSFERRING = "stuck_transferring"
    ROOM_MIXUP = "room_mixup"
    CONTEXT_TRUNCATION = "context_truncation"
    SILENT_STREAM_END = "silent_stream_end"
    NO_HEARTBEAT = "no_heartbeat"
    CLIENT_ERROR_AS_SERVER_ERROR = "client_error_as_server_error"
    BOOTSTRAP_CALL_BLOCKS_DECODING = "bootstrap_call_blocks_decoding"
    ERROR_EVENT_NOT_JSON = "error_event_not_json"
    ABORT_FREES_KV_MID_TRANSFER = "abort_frees_kv_mid_transfer"
    LOST_PREFILL_NEVER_RETRIED = "lost_prefill_never_retried"
    SIGTERM_CUTS_STREAMS = "sigterm_cuts_streams"
    KV_SOCKET_LEAK = "kv_socket_leak"
    FAILED_ROOM_PINNED = "failed_room_pinned"
    WAITING_CLOCK_FROM_ARRIVAL = "waiting_clock_from_arrival"
    DECODE_PREFIX_KV_MISPLACED = "decode_prefix_kv_misplaced"
    STALE_DECODE_REGISTRATION = "stale_decode_registration"
    FAILED_TRANSFER_ANSWERED_OK = "failed_transfer_answered_ok"
    HEARTBEAT_GIVES_UP_AT_FIRST_MISS = "heartbeat_gives_up_at_first_miss"
    LOAD_REPORT_OMITS_TRANSFERS = "load_report_omits_transfers"
    FIRST_TOKEN_FINISH_UNCHECKED = "first_token_finish_unchecked"
    KV_CHECKSUM_IGNORED = "kv_checksum_ignored"
    SAMPLING_UNCHECKED = "sampling_unchecked"
    IDLE_TRANSFER_STALL = "idle_transfer_stall"
    PAGE_SIZE_UNCHECKED = "page_size_unchecked"
    LOST_PREFILL_FAILS_EVERY_ROOM = "lost_prefill_fails_every_room"


def parse_defects(spec: str) -> frozenset[Defect]:
    """Parse a comma-separated list; an unknown name is an error, never ignored."""
    names = [part.strip() for part in spec.split(",") if part.strip()]
    known = {d.value: d for d in Defect}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ValueError(f"unknown pdsim defect(s): {', '.join(unknown)}; known: {', '.join(sorted(known))}")
    return frozenset(known[n] for n in names)


def defects_from_env() -> frozenset[Defect]:
    return parse_defects(os.environ.get("PDSIM_DEFECTS", ""))


if __name__ == "__main__":  # `python -m pdsim.defects`: the names, one a line (for the kill matrix)
    print("\n".join(d.value for d in Defect))
