"""The Aho-Corasick automaton of b10621's common/trie.{h,cpp}, over code points.

State numbers are trie node indices in creation order and transitions are walked in code point
order (the C++ keeps them in a std::map), because both show up in the GBNF rule names.
"""

from __future__ import annotations

from collections import deque


class AhoCorasick:
    def __init__(self, strings: list[str]) -> None:
        self.children: list[dict[int, int]] = [{}]
        self.pattern: list[int] = [-1]  # index of the pattern ending at each node, -1 if none
        n_patterns = 0
        for word in strings:
            node = 0
            for ch in map(ord, word):
                nxt = self.children[node].get(ch)
                if nxt is None:
                    nxt = len(self.children)
                    self.children.append({})
                    self.pattern.append(-1)
                    self.children[node][ch] = nxt
                node = nxt
            if self.pattern[node] < 0:
                self.pattern[node] = n_patterns
                n_patterns += 1

        n = len(self.children)
        self.fail = [0] * n
        order: list[int] = []
        queue = deque([0])
        while queue:
            u = queue.popleft()
            order.append(u)
            for ch in sorted(self.children[u]):
                v = self.children[u][ch]
                if u != 0:
                    f = self.fail[u]
                    while f and ch not in self.children[f]:
                        f = self.fail[f]
                    target = self.children[f].get(ch)
                    self.fail[v] = target if target is not None and target != v else 0
                queue.append(v)

        # fail links point to strictly shorter suffixes, so the first pattern on the chain is the longest
        self.match = [-1] * n
        for u in order:
            self.match[u] = self.pattern[u] if self.pattern[u] >= 0 else (self.match[self.fail[u]] if u else -1)

        self.alphabet = sorted({ch for node in self.children for ch in node})

    def num_states(self) -> int:
        return len(self.children)

    def is_terminal(self, state: int) -> bool:
        return self.match[state] >= 0

    def next(self, state: int, ch: int) -> int:
        while state and ch not in self.children[state]:
            state = self.fail[state]
        return self.children[state].get(ch, 0)
