"""Personal data found and replaced before tokenisation: Microsoft Presidio with
recognisers for the UAE.

Entities and their placeholders (each hit becomes ``<TYPE>``):

- ``EMIRATES_ID``: 784-YYYY-NNNNNNN-C with or without dashes or spaces. The 15th digit
  is a Luhn check digit over the first fourteen (the whole number passes Luhn); YYYY is
  the holder's year of birth (19xx or 20xx). A number failing either is not a hit.
- ``PHONE_NUMBER``: UAE mobiles (05x: 050, 052, 053, 054, 055, 056, 058) and landlines (area
  codes 2 Abu Dhabi, 3 Al Ain, 4 Dubai, 6 Sharjah/Ajman/Umm Al Quwain, 7 Ras Al Khaimah,
  9 Fujairah) after a ``+971``, ``00971`` or ``0`` prefix, with spaces, dashes, dots or
  an ``(0)``; each candidate is confirmed with libphonenumber's UAE numbering plan
  (``phonenumbers``, a dependency of Presidio).
- ``IBAN_CODE``: AE IBANs (AE, 2 check digits, 3-digit bank code, 16-digit account:
  23 characters, grouped by four or not), mod-97 checked; other countries' IBANs through
  Presidio's own `IbanRecognizer` (also mod-97).
- ``EMAIL_ADDRESS``: Presidio's pattern with its domain check run offline (the Public
  Suffix List snapshot shipped in ``tldextract``; Presidio's default would fetch the list
  from the internet).
- ``CREDIT_CARD``: Presidio's pattern, Luhn-checked.
- ``PERSON``: only with a spaCy pipeline that has an NER component (``ner_model``: an
  installed package name or a pipeline directory). spaCy's models are not on PyPI and
  are never downloaded at run time here: without one, names are NOT found, and the
  report says so.

Engines are built once per Python process (`engine_for`) and reused by every Spark
partition that process handles.
"""

from __future__ import annotations

import bisect
import functools
import itertools
import re
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from presidio_analyzer import AnalyzerEngine, EntityRecognizer, RecognizerResult
    from presidio_analyzer.context_aware_enhancers import ContextAwareEnhancer
    from presidio_analyzer.nlp_engine import NlpArtifacts, NlpEngine
    from presidio_anonymizer import AnonymizerEngine
    from presidio_anonymizer.entities import OperatorConfig

K = TypeVar("K")

#: Every entity the job can find, in report order.
ENTITIES = (
    "EMIRATES_ID",
    "PHONE_NUMBER",
    "IBAN_CODE",
    "EMAIL_ADDRESS",
    "CREDIT_CARD",
    "PERSON",
)
#: Found without any NLP model.
PATTERN_ENTITIES = ENTITIES[:-1]
LANGUAGE = "en"
#: Hits scoring below this are ignored; every pattern hit here is validated to 1.0 and
#: spaCy's NER hits score 0.85.
SCORE_THRESHOLD = 0.5


def placeholder(entity: str) -> str:
    """The text a hit of ``entity`` is replaced with."""
    return f"<{entity}>"


class PiiSetupError(RuntimeError):
    """The PII scanner cannot be built as configured (a missing NER model)."""


def luhn_valid(digits: str) -> bool:
    """Whether a string of decimal digits passes the Luhn check."""
    if not digits.isdigit():
        return False
    total = 0
    for index, char in enumerate(reversed(digits)):
        value = int(char)
        if index % 2:
            value = value * 2 - 9 if value > 4 else value * 2
        total += value
    return total % 10 == 0


def iban_valid(text: str) -> bool:
    """ISO 13616 mod-97 check of an IBAN (spaces ignored)."""
    iban = re.sub(r"\s", "", text).upper()
    if not re.fullmatch(r"[A-Z]{2}\d{2}[A-Z0-9]{1,30}", iban):
        return False
    rearranged = iban[4:] + iban[:4]
    number = "".join(str(int(ch, 36)) for ch in rearranged)
    return int(number) % 97 == 1


def emirates_id_valid(text: str) -> bool:
    """Whether ``text`` is an Emirates ID number: 784, a 19xx/20xx year, 7 digits and a
    Luhn check digit (separators ignored)."""
    digits = re.sub(r"[\s-]", "", text)
    return (
        len(digits) == 15
        and digits.startswith("784")
        and digits[3:5] in ("19", "20")
        and luhn_valid(digits)
    )


#: UAE numbers: prefix, then a mobile (5 + 0/2/3/4/5/6/8) or landline area code, then
#: seven digits; separators between any groups.
_SEP = r"[ .\-]?"
UAE_PHONE_REGEX = (
    r"(?<![\w+])"
    r"(?:(?:\+|00)971" + _SEP + r"(?:\(0\)" + _SEP + r")?|\(?0)"
    r"(?:5[02-68]|[234679])\)?"
    r"(?:" + _SEP + r"\d){7}"
    r"(?![\w])"
)
EMIRATES_ID_REGEX = r"(?<![\w-])784[ -]?\d{4}[ -]?\d{7}[ -]?\d(?![\w-])"
AE_IBAN_REGEX = r"(?<![A-Za-z0-9])AE\d{2}(?: ?\d{4}){4} ?\d{3}(?![A-Za-z0-9])"


def uae_phone_valid(text: str) -> bool:
    """libphonenumber's verdict on a UAE number (any of the written prefixes)."""
    import phonenumbers  # noqa: PLC0415 - Presidio's dependency; only the data image has it

    try:
        number = phonenumbers.parse(text, "AE")
    except phonenumbers.NumberParseException:
        return False
    return bool(number.country_code == 971 and phonenumbers.is_valid_number(number))


@dataclass(frozen=True)
class PiiSettings:
    """How the scanner is built (picklable: it travels to Spark's Python workers).

    Args:
        ner_model: a spaCy pipeline with an NER component (an installed package name or a
            directory) for ``PERSON``; ``None``: names are not searched for.
        score_threshold: hits scoring below it are ignored.
    """

    ner_model: str | None = None
    score_threshold: float = SCORE_THRESHOLD

    @property
    def entities(self) -> tuple[str, ...]:
        """The entities this configuration searches for."""
        return ENTITIES if self.ner_model else PATTERN_ENTITIES


def check_ner_model(name: str) -> None:
    """Refuse a spaCy model that is neither installed nor a directory (Presidio would
    try to download it)."""
    import spacy  # noqa: PLC0415

    if not (spacy.util.is_package(name) or Path(name).is_dir()):
        raise PiiSetupError(
            f"the NER model {name!r} is neither an installed spaCy package nor a pipeline "
            "directory; install its wheel (spaCy's models are published on GitHub, not "
            "PyPI) or give the directory of a saved pipeline, or leave out --ner-model "
            "(names are then not anonymised)"
        )


def _recognizers() -> list[EntityRecognizer]:
    import tldextract  # noqa: PLC0415
    from presidio_analyzer import Pattern, PatternRecognizer  # noqa: PLC0415
    from presidio_analyzer.predefined_recognizers import (  # noqa: PLC0415
        CreditCardRecognizer,
        EmailRecognizer,
        IbanRecognizer,
    )

    class EmiratesIdRecognizer(PatternRecognizer):
        def __init__(self) -> None:
            super().__init__(
                supported_entity="EMIRATES_ID",
                patterns=[Pattern("Emirates ID", EMIRATES_ID_REGEX, 0.3)],
                context=["emirates", "id", "identity", "eid"],
                supported_language=LANGUAGE,
                name="EmiratesIdRecognizer",
            )

        def validate_result(self, pattern_text: str) -> bool:
            return emirates_id_valid(pattern_text)

    class UaePhoneRecognizer(PatternRecognizer):
        def __init__(self) -> None:
            super().__init__(
                supported_entity="PHONE_NUMBER",
                patterns=[Pattern("UAE phone", UAE_PHONE_REGEX, 0.3)],
                context=["phone", "mobile", "tel", "call", "whatsapp"],
                supported_language=LANGUAGE,
                name="UaePhoneRecognizer",
            )

        def validate_result(self, pattern_text: str) -> bool:
            return uae_phone_valid(pattern_text)

    class AeIbanRecognizer(PatternRecognizer):
        def __init__(self) -> None:
            super().__init__(
                supported_entity="IBAN_CODE",
                patterns=[Pattern("AE IBAN", AE_IBAN_REGEX, 0.3)],
                context=["iban", "account", "bank"],
                supported_language=LANGUAGE,
                name="AeIbanRecognizer",
            )

        def validate_result(self, pattern_text: str) -> bool:
            return iban_valid(pattern_text)

    offline_psl = tldextract.TLDExtract(suffix_list_urls=(), cache_dir=None)

    # Presidio's pattern behind a lookahead that needs an "@" after a run of local-part
    # characters: the same matches, without the pattern's backtracking at every word
    # (it was the slowest recogniser by three times).
    (email_pattern,) = EmailRecognizer.PATTERNS
    local_run = r"\b(?=[!#$%&'*+\-/=?^_`{|}~.\w]++@)"
    fast_email = Pattern(email_pattern.name, local_run + email_pattern.regex, email_pattern.score)

    class OfflineEmailRecognizer(EmailRecognizer):
        """Presidio's e-mail recogniser, its domain check against the bundled list."""

        def __init__(self, supported_language: str) -> None:
            super().__init__(patterns=[fast_email], supported_language=supported_language)

        def validate_result(self, pattern_text: str) -> bool:
            return bool(offline_psl(pattern_text.rsplit("@", 1)[-1]).suffix)

    return [
        EmiratesIdRecognizer(),
        UaePhoneRecognizer(),
        AeIbanRecognizer(),
        IbanRecognizer(supported_language=LANGUAGE),
        OfflineEmailRecognizer(supported_language=LANGUAGE),
        CreditCardRecognizer(supported_language=LANGUAGE),
    ]


def _no_context_enhancer() -> ContextAwareEnhancer:
    from presidio_analyzer.context_aware_enhancers import ContextAwareEnhancer  # noqa: PLC0415

    class NoContextEnhancer(ContextAwareEnhancer):
        """Leaves scores as the recognisers set them. Every pattern hit here is already
        validated (checksum, numbering plan, domain) to the top score, so context words
        cannot change a decision; skipping the step halves the analyzer's time."""

        def __init__(self) -> None:
            super().__init__(0.0, 0.0, 0, 0)

        def enhance_using_context(
            self,
            text: str,
            raw_results: list[RecognizerResult],
            nlp_artifacts: NlpArtifacts,
            recognizers: list[EntityRecognizer],
            context: list[str] | None = None,
        ) -> list[RecognizerResult]:
            return raw_results

    return NoContextEnhancer()


def build_analyzer(settings: PiiSettings) -> AnalyzerEngine:
    """A Presidio analyzer with the UAE recognisers and, with ``settings.ner_model``,
    spaCy's NER for names. Loads nothing from the network."""
    from presidio_analyzer import AnalyzerEngine, RecognizerRegistry  # noqa: PLC0415
    from presidio_analyzer.nlp_engine import NoOpNlpEngine, SpacyNlpEngine  # noqa: PLC0415
    from presidio_analyzer.predefined_recognizers import SpacyRecognizer  # noqa: PLC0415

    registry = RecognizerRegistry(supported_languages=[LANGUAGE])
    for recognizer in _recognizers():
        registry.add_recognizer(recognizer)
    models = [{"lang_code": LANGUAGE, "model_name": settings.ner_model or "none"}]
    if settings.ner_model:
        check_ner_model(settings.ner_model)
        nlp_engine: NlpEngine = SpacyNlpEngine(models=models)
        registry.add_recognizer(
            SpacyRecognizer(supported_language=LANGUAGE, supported_entities=["PERSON"])
        )
    else:
        # Every recogniser above is self-contained; no tokens or NER needed.
        nlp_engine = NoOpNlpEngine(models=models)
    return AnalyzerEngine(
        registry=registry,
        nlp_engine=nlp_engine,
        supported_languages=[LANGUAGE],
        default_score_threshold=settings.score_threshold,
        context_aware_enhancer=_no_context_enhancer(),
    )


@functools.lru_cache(maxsize=4)
def engine_for(settings: PiiSettings) -> AnalyzerEngine:
    """This process's analyzer for ``settings``: built on the first partition a Spark
    worker handles, reused for the next."""
    return build_analyzer(settings)


def resolve_overlaps(results: Iterable[RecognizerResult]) -> list[RecognizerResult]:
    """Non-overlapping hits, preferring the higher score, then the longer span; in text
    order. (Several recognisers can claim the same digits.)"""
    starts: list[int] = []  # the kept hits' starts, sorted; they never overlap
    kept: list[RecognizerResult] = []
    ranked = sorted(results, key=lambda r: (-r.score, -(r.end - r.start), r.start))
    for result in ranked:
        index = bisect.bisect_left(starts, result.start)
        if index < len(kept) and kept[index].start < result.end:
            continue  # overlaps the next kept hit
        if index > 0 and kept[index - 1].end > result.start:
            continue  # overlaps the previous kept hit
        starts.insert(index, result.start)
        kept.insert(index, result)
    return kept


#: Arabic-Indic (U+0660..) and Extended Arabic-Indic (U+06F0..) digits to ASCII: one
#: character for one, so the hits' offsets hold for the original text.
DIGIT_FOLD = str.maketrans(
    "\u0660\u0661\u0662\u0663\u0664\u0665\u0666\u0667\u0668\u0669"
    "\u06f0\u06f1\u06f2\u06f3\u06f4\u06f5\u06f6\u06f7\u06f8\u06f9",
    "01234567890123456789",
)


def find(text: str, analyzer: AnalyzerEngine, settings: PiiSettings) -> list[RecognizerResult]:
    """The PII hits of ``text``, overlaps resolved. Numbers written in Arabic-Indic
    digits are found as well: the scan reads a copy with the digits folded to ASCII."""
    results = analyzer.analyze(
        text=text.translate(DIGIT_FOLD),
        language=LANGUAGE,
        entities=list(settings.entities),
        score_threshold=settings.score_threshold,
    )
    return resolve_overlaps(results)


#: Between the documents of one analyzer call. No recogniser matches across a line
#: break (the patterns' separators are spaces, dashes and dots).
BATCH_SEPARATOR = "\n\n"
#: Characters of text per analyzer call: Presidio's per-call overhead is paid once per
#: batch rather than once per document.
BATCH_CHARS = 64_000


def find_many(
    texts: Sequence[str], analyzer: AnalyzerEngine, settings: PiiSettings
) -> list[list[RecognizerResult]]:
    """The hits of each text (offsets into that text), scanning them in batches joined
    by `BATCH_SEPARATOR`; a hit that would straddle two documents is cut at the end of
    the one it starts in."""
    from presidio_analyzer import RecognizerResult  # noqa: PLC0415

    found: list[list[RecognizerResult]] = [[] for _ in texts]
    start = 0
    while start < len(texts):
        stop, size = start, 0
        while stop < len(texts) and (stop == start or size + len(texts[stop]) <= BATCH_CHARS):
            size += len(texts[stop]) + len(BATCH_SEPARATOR)
            stop += 1
        offsets = []
        position = 0
        for text in texts[start:stop]:
            offsets.append(position)
            position += len(text) + len(BATCH_SEPARATOR)
        joined = BATCH_SEPARATOR.join(texts[start:stop])
        for hit in find(joined, analyzer, settings):
            index = bisect.bisect_right(offsets, hit.start) - 1
            base, length = offsets[index], len(texts[start + index])
            if hit.start - base >= length:
                continue  # inside the separator
            found[start + index].append(
                RecognizerResult(
                    hit.entity_type, hit.start - base, min(hit.end - base, length), hit.score
                )
            )
        start = stop
    return found


@functools.lru_cache(maxsize=1)
def _anonymizer() -> tuple[AnonymizerEngine, dict[str, OperatorConfig]]:
    from presidio_anonymizer import AnonymizerEngine  # noqa: PLC0415
    from presidio_anonymizer.entities import OperatorConfig  # noqa: PLC0415

    operators = {e: OperatorConfig("replace", {"new_value": placeholder(e)}) for e in ENTITIES}
    return AnonymizerEngine(), operators


def replace(text: str, hits: Sequence[RecognizerResult]) -> str:
    """``text`` with each hit replaced by its typed placeholder, by Presidio's
    anonymizer (``replace`` operator); a text without hits is returned as it is."""
    if not hits:
        return text
    from presidio_anonymizer.entities import RecognizerResult as Span  # noqa: PLC0415

    engine, operators = _anonymizer()
    spans = [Span(hit.entity_type, hit.start, hit.end, hit.score) for hit in hits]
    return str(engine.anonymize(text=text, analyzer_results=spans, operators=operators).text)


def anonymise(
    items: Iterable[tuple[K, str]], settings: PiiSettings
) -> Iterator[tuple[K, str, dict[str, int]]]:
    """Each ``(key, text)`` as ``(key, text with its PII replaced, hit counts by type)``,
    streamed: texts are scanned in batches of about `BATCH_CHARS` characters."""
    analyzer = engine_for(settings)
    batch: list[tuple[K, str]] = []
    size = 0
    for item in itertools.chain(items, [None]):
        if item is not None:
            batch.append(item)
            size += len(item[1])
            if size < BATCH_CHARS:
                continue
        texts = [text for _, text in batch]
        for (key, text), hits in zip(batch, find_many(texts, analyzer, settings), strict=True):
            yield key, replace(text, hits), dict(Counter(hit.entity_type for hit in hits))
        batch, size = [], 0
