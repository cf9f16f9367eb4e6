"""What pdsim does wherever SGLang's code makes a choice a real bug class gets wrong.

The engine's paths read a ``Behaviour``, never a defect: ``if self.behaviour.inflight_watchdog``
says what the engine does, and the clean ``Behaviour()`` is SGLang 0.5.23's. A defect
(``pdsim.defects``) is one entry of ``CHANGES``: the one field it changes and the value it
sets. So a reader of ``prefill.py`` sees prefill, and a reader of this table sees every
defect and the one behaviour it bends; ``tests/pdsim/test_behaviour.py`` holds each defect
to one field and each field to one defect.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from pdsim.defects import Defect

__all__ = ["CHANGES", "Behaviour"]


@dataclass(frozen=True)
class Behaviour:
    """Each field as SGLang 0.5.23 behaves; the comment names the defect that changes it."""

    # ---- both engines ----
    timeouts_checked_while_idle: bool = True  # idle_watchdog: only after an arrival
    abort_releases: bool = True  # leak_on_abort: the request keeps its queue place and KV
    sigterm_drains: bool = True  # sigterm_cuts_streams: exit at once, streams cut
    truncates_context: bool = False  # context_truncation: old chat turns dropped
    client_error_status: int = 400  # client_error_as_server_error: 500
    stream_ends_with_an_event: bool = True  # silent_stream_end: a failed stream just closes
    error_event_is_json: bool = True  # error_event_not_json: plain text, then [DONE]
    # ---- prefill ----
    bootstrap_timeout: bool = True  # no_bootstrap_timeout
    inflight_watchdog: bool = True  # no_inflight_watchdog
    failure_told_to_decode: bool = True  # no_abort_to_decode
    failed_room_released: bool = True  # failed_room_pinned: answered 500, kept for good
    transfers_start_after_idle: bool = True  # idle_transfer_stall: the first after 5 s idle held
    restarted_decode_replaces_the_old: bool = True  # stale_decode_registration
    # ---- decode ----
    heartbeat: bool = True  # no_heartbeat
    heartbeat_tolerates_misses: bool = True  # heartbeat_gives_up_at_first_miss
    lost_prefill_retried: bool = True  # lost_prefill_never_retried
    # lost_prefill_fails_every_room: a prefill the heartbeat lost fails the rooms of every
    # prefill, its live twins' too
    lost_prefill_fails_its_rooms_only: bool = True
    lost_link_forgets_the_route: bool = True  # stale_bootstrap_cache
    bootstrap_calls_block_decoding: bool = False  # bootstrap_call_blocks_decoding
    kv_socket_closed: bool = True  # kv_socket_leak
    rooms_kept_apart: bool = True  # room_mixup
    prefix_kv_joined: bool = True  # decode_prefix_kv_misplaced
    transferring_times_out: bool = True  # stuck_transferring
    waiting_clock_from_metadata: bool = True  # waiting_clock_from_arrival
    failed_transfer_fails: bool = True  # failed_transfer_answered_ok
    first_token_may_finish: bool = True  # first_token_finish_unchecked
    abort_waits_for_the_transfer: bool = True  # abort_frees_kv_mid_transfer
    load_report_counts_transfers: bool = True  # load_report_omits_transfers
    kv_checksum_checked: bool = True  # kv_checksum_ignored: the flag taken, the digest never compared
    peer_page_size_checked: bool = True  # page_size_unchecked: KV of another layout taken, never seen
    # ---- the HTTP side ----
    sampling_checked: bool = True  # sampling_unchecked: impossible sampling parameters served

    @classmethod
    def with_defects(cls, defects: frozenset[Defect]) -> Behaviour:
        """SGLang's behaviour with each defect's one change."""
        return replace(cls(), **dict(CHANGES[d] for d in defects))


CHANGES: dict[Defect, tuple[str, Any]] = {
    Defect.IDLE_WATCHDOG: ("timeouts_checked_while_idle", False),
    Defect.LEAK_ON_ABORT: ("abort_releases", False),
    Defect.SIGTERM_CUTS_STREAMS: ("sigterm_drains", False),
    Defect.CONTEXT_TRUNCATION: ("truncates_context", True),
    Defect.CLIENT_ERROR_AS_SERVER_ERROR: ("client_error_status", 500),
    Defect.SILENT_STREAM_END: ("stream_ends_with_an_event", False),
    Defect.ERROR_EVENT_NOT_JSON: ("error_event_is_json", False),
    Defect.NO_BOOTSTRAP_TIMEOUT: ("bootstrap_timeout", False),
    Defect.NO_INFLIGHT_WATCHDOG: ("inflight_watchdog", False),
    Defect.NO_ABORT_TO_DECODE: ("failure_told_to_decode", False),
    Defect.FAILED_ROOM_PINNED: ("failed_room_released", False),
    Defect.STALE_DECODE_REGISTRATION: ("restarted_decode_replaces_the_old", False),
    Defect.NO_HEARTBEAT: ("heartbeat", False),
    Defect.HEARTBEAT_GIVES_UP_AT_FIRST_MISS: ("heartbeat_tolerates_misses", False),
    Defect.LOST_PREFILL_NEVER_RETRIED: ("lost_prefill_retried", False),
    Defect.STALE_BOOTSTRAP_CACHE: ("lost_link_forgets_the_route", False),
    Defect.BOOTSTRAP_CALL_BLOCKS_DECODING: ("bootstrap_calls_block_decoding", True),
    Defect.KV_SOCKET_LEAK: ("kv_socket_closed", False),
    Defect.ROOM_MIXUP: ("rooms_kept_apart", False),
    Defect.DECODE_PREFIX_KV_MISPLACED: ("prefix_kv_joined", False),
    Defect.STUCK_TRANSFERRING: ("transferring_times_out", False),
    Defect.WAITING_CLOCK_FROM_ARRIVAL: ("waiting_clock_from_metadata", False),
    Defect.FAILED_TRANSFER_ANSWERED_OK: ("failed_transfer_fails", False),
    Defect.FIRST_TOKEN_FINISH_UNCHECKED: ("first_token_may_finish", False),
    Defect.ABORT_FREES_KV_MID_TRANSFER: ("abort_waits_for_the_transfer", False),
    Defect.LOAD_REPORT_OMITS_TRANSFERS: ("load_report_counts_transfers", False),
    Defect.KV_CHECKSUM_IGNORED: ("kv_checksum_checked", False),
    Defect.SAMPLING_UNCHECKED: ("sampling_checked", False),
    Defect.IDLE_TRANSFER_STALL: ("transfers_start_after_idle", False),
    Defect.PAGE_SIZE_UNCHECKED: ("peer_page_size_checked", False),
    Defect.LOST_PREFILL_FAILS_EVERY_ROOM: ("lost_prefill_fails_its_rooms_only", False),
}
