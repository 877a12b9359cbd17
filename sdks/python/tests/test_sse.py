"""The SSE parser on byte streams cut at awkward places."""

from agentplane._sse import SseMessage, SseParser


def parse(*parts: bytes) -> list[SseMessage]:
    parser = SseParser()
    return [message for part in parts for message in parser.feed(part)] + parser.close()


def test_events_ids_comments_and_multiline_data_with_any_line_ending() -> None:
    text = b': keep-alive\nid: 1\nevent: item.delta\ndata: {"a":1}\n\nid: 2\r\nevent: turn.ended\r\ndata: x\r\ndata: y\r\n\r\ndata:no space\r\r'
    assert parse(text) == [
        SseMessage("item.delta", '{"a":1}', "1"),
        SseMessage("turn.ended", "x\ny", "2"),
        # The last id stays the stream's, as in an EventSource.
        SseMessage("message", "no space", "2"),
    ]


def test_one_byte_at_a_time_a_split_crlf_or_utf8_character_changes_nothing() -> None:
    text = 'id: 7\r\nevent: item.delta\r\ndata: {"delta":"héllo ✓"}\r\n\r\n'.encode()
    assert parse(*(bytes([b]) for b in text)) == [SseMessage("item.delta", '{"delta":"héllo ✓"}', "7")]


def test_an_event_cut_off_by_the_end_of_the_stream_is_not_delivered() -> None:
    assert parse(b"id: 1\ndata: whole\n\nid: 2\ndata: half") == [SseMessage("message", "whole", "1")]
