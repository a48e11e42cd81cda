"""BM25 search over the local corpus that ships with llmgym (``llmgym/data/search_corpus.jsonl``).

The corpus describes an invented world (countries, cities, rivers, people, festivals) whose
facts are consistent with each other and cannot be known without searching. Questions about
it, some needing two searches, are in ``llmgym/data/search_questions.jsonl``.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from llmgym.error import DatasetError

DATA_DIR = Path(__file__).resolve().parents[2] / "data"
CORPUS_PATH = DATA_DIR / "search_corpus.jsonl"
QUESTIONS_PATH = DATA_DIR / "search_questions.jsonl"
_TOKEN = re.compile(r"[a-z0-9]+")
_STOPWORDS = frozenset("a an and are as at by for from in is it of on or the to was what which who with "
                       "how many much did does year".split())


def tokenize(text: str) -> list[str]:
    """Lower-cased alphanumeric words without stopwords."""
    return [token for token in _TOKEN.findall(text.lower()) if token not in _STOPWORDS]


@dataclass(frozen=True)
class Document:
    """One passage of the corpus."""

    id: int
    title: str
    text: str


class BM25Index:
    """Okapi BM25 (``k1``, ``b``) over a list of documents; title words count like body words."""

    def __init__(self, documents: list[Document], k1: float = 1.5, b: float = 0.75) -> None:
        self.documents = documents
        self.k1, self.b = k1, b
        self._terms = [Counter(tokenize(f"{doc.title} {doc.text}")) for doc in documents]
        lengths = [sum(terms.values()) for terms in self._terms]
        self._lengths = lengths
        self._average_length = sum(lengths) / max(1, len(lengths))
        frequency = Counter(term for terms in self._terms for term in terms)
        total = len(documents)
        self._idf = {term: math.log(1 + (total - count + 0.5) / (count + 0.5))
                     for term, count in frequency.items()}

    def search(self, query: str, k: int = 3) -> list[Document]:
        """The ``k`` best documents for ``query`` (fewer when fewer share a word with it)."""
        query_terms = [term for term in set(tokenize(query)) if term in self._idf]
        scores = []
        for index, terms in enumerate(self._terms):
            score = 0.0
            norm = self.k1 * (1 - self.b + self.b * self._lengths[index] / self._average_length)
            for term in query_terms:
                count = terms.get(term, 0)
                if count:
                    score += self._idf[term] * count * (self.k1 + 1) / (count + norm)
            if score > 0:
                scores.append((score, -index))
        scores.sort(reverse=True)
        return [self.documents[-negative] for _, negative in scores[:k]]


def load_corpus(path: str | Path = CORPUS_PATH) -> list[Document]:
    """The passages of a corpus JSONL file (``id``, ``title``, ``text`` per line)."""
    documents = []
    with Path(path).open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                documents.append(Document(int(row["id"]), str(row["title"]), str(row["text"])))
            except (ValueError, KeyError, TypeError) as exc:
                raise DatasetError(
                    f"{path}:{number}: expected {{'id', 'title', 'text'}}, got an error: {exc}") from None
    return documents


@lru_cache(maxsize=4)
def default_index(path: str = str(CORPUS_PATH)) -> BM25Index:
    """The index of the shipped corpus, built once per process."""
    return BM25Index(load_corpus(path))
