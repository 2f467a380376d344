"""The template's message spans in a prompt's tokens (common_chat_msg_delimiters::split, find_message_spans): each
delimiter (a role's turn opener, tokenized on its own with special tokens parsed) found in order, an image's span
skipped whole; a span runs from one match to the next. The user messages' starts, and the last of them."""

from __future__ import annotations


def user_starts(tokenizer, delimiters, tokens: list[int], media=()) -> tuple[frozenset[int], int]:
    """(where user messages start, the last one or -1) for the body's message_delimiters [{role, delimiter}]."""
    if not isinstance(delimiters, list) or not tokens:
        return frozenset(), -1
    pieces = [
        (d.get("role", ""), tokenizer.tokenize(d.get("delimiter", ""), add_special=False, parse_special=True))
        for d in delimiters
        if isinstance(d, dict) and isinstance(d.get("delimiter"), str)
    ]
    pieces = [(role, ids) for role, ids in pieces if ids]
    if not pieces:
        return frozenset(), -1
    skips = {m.start: m.n_tokens for m in media}
    starts: list[int] = []
    i, n = 0, len(tokens)
    while i < n:
        if i in skips:
            i += skips[i]
            continue
        for role, ids in pieces:
            if tokens[i : i + len(ids)] == ids:
                if role == "user":
                    starts.append(i)
                break
        i += 1
    return frozenset(starts), starts[-1] if starts else -1
