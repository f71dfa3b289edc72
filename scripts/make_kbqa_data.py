"""Build a KBQA data set from the CLDR data that babel ships: a knowledge base (triples and names with aliases) and
questions about it, for ``plm-finetune task=kbqa``.

The knowledge base holds what CLDR says about territories, languages, scripts, currencies and the cities that name
time zones: a territory's currency, official and spoken languages and cities; a language's script and main country; a
currency's countries and symbol; a script's languages; a city's country and time zone. Names are CLDR's English
display names with aliases from other locales (the endonym "Deutschland", "Allemagne"), a currency's plural, and a
time zone's standard name. Ids are CLDR's codes with their kind (``territory/DE``, ``language/de``,
``currency/EUR``, ``script/Latn``, ``city/Europe/Paris``, ``timezone/Europe_Central``, ``symbol/€``).

Questions are written from templates (five or so wordings per relation) naming the subject by its English name or
an alias, sometimes lowercased, without its accents, or with one letter dropped, as people type. The split is by
subject: validation and test questions ask about entities that no training question asks about; validation in the
training's wordings, test in the two wordings of each relation that neither shows.

    python scripts/make_kbqa_data.py --out /tmp/kbqa                        # the whole set
    python scripts/make_kbqa_data.py --out DIR --subjects 30 --split 60,20,20   # the small copy the tests ship

Writes ``kb_triples.tsv`` (subject<TAB>relation<TAB>object), ``kb_names.tsv`` (id<TAB>name), ``train.jsonl``,
``validation.jsonl`` and ``test.jsonl`` (``{"question", "subject", "relation", "answers"}``) and prints their sizes
as JSON. Deterministic for a given babel (CLDR) version and ``--seed``. Needs ``pip install plm_toolkit[kbqa-data]``.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import unicodedata
from collections import defaultdict
from pathlib import Path

# relation -> (kind of its subjects, wordings); "{}" stands for the subject's name. The last HELD_OUT wordings of each
# are asked in the test split only; training and validation ask the others.
RELATIONS: dict[str, tuple[str, list[str]]] = {
    "territory.currency": (
        "territory",
        [
            "What currency is used in {}?",
            "What is the currency of {}?",
            "Which currency do people pay with in {}?",
            "What money does {} use?",
            "{} uses which currency?",
            "If I travel to {}, what currency should I bring?",
            "What do shops in {} take as money?",
        ],
    ),
    "territory.official_language": (
        "territory",
        [
            "What is the official language of {}?",
            "Which languages are official in {}?",
            "What language has official status in {}?",
            "Name an official language of {}.",
            "The government of {} uses which official language?",
            "In {}, which language is recognised as official?",
            "What language are the laws of {} written in?",
        ],
    ),
    "territory.spoken_language": (
        "territory",
        [
            "What languages are spoken in {}?",
            "Which language do people speak in {}?",
            "What do people in {} speak?",
            "Name a language spoken in {}.",
            "What is a common language among the people of {}?",
            "What languages would you hear in {}?",
            "What is the mother tongue of many people in {}?",
        ],
    ),
    "territory.city": (
        "territory",
        [
            "Name a city in {}.",
            "Which city is in {}?",
            "What is a city located in {}?",
            "Give me a city of {}.",
            "What cities can be found in {}?",
            "Which town lies in {}?",
        ],
    ),
    "currency.territory": (
        "currency",
        [
            "Which countries use the {}?",
            "Where is the {} used?",
            "In which country can you pay with the {}?",
            "The {} is the currency of which country?",
            "What places have the {} as their money?",
            "Where would I spend the {}?",
        ],
    ),
    "currency.symbol": (
        "currency",
        [
            "What is the symbol of the {}?",
            "How is the {} written as a symbol?",
            "Which sign stands for the {}?",
            "What symbol represents the {}?",
            "What sign do price tags use for the {}?",
        ],
    ),
    "language.script": (
        "language",
        [
            "What script is {} written in?",
            "Which writing system does {} use?",
            "{} is written in what alphabet?",
            "What script do people use to write {}?",
            "In which script would you write {}?",
            "What letters are used for {}?",
        ],
    ),
    "language.territory": (
        "language",
        [
            "Where is {} mainly spoken?",
            "Which country is {} mostly spoken in?",
            "In what country do most speakers of {} live?",
            "{} is the language of which country?",
            "What is the home country of the {} language?",
            "Where do people speak {}?",
        ],
    ),
    "script.language": (
        "script",
        [
            "Which languages are written in {}?",
            "Name a language that uses the {} script.",
            "What language uses {} writing?",
            "Which language can be written with {}?",
            "What is written with the {} letters?",
        ],
    ),
    "city.territory": (
        "city",
        [
            "Which country is {} in?",
            "In what country is the city of {}?",
            "{} is located in which country?",
            "What country is {} a city of?",
            "The city of {} belongs to which country?",
            "Where is {}?",
        ],
    ),
    "city.timezone": (
        "city",
        [
            "What time zone is {} in?",
            "Which time zone does {} use?",
            "What is the time zone of {}?",
            "What time zone do clocks in {} follow?",
            "{} keeps time in which time zone?",
            "What time is it in {} called?",
        ],
    ),
}
HELD_OUT = 2
# Locales whose names become aliases of every territory (besides the territory's own official language).
ALIAS_LOCALES = ("fr", "de", "es")
# Territory codes that are groupings or placeholders, not places (CLDR's EU, UN, ZZ ...).
NOT_PLACES = {"EU", "EZ", "UN", "ZZ", "QO", "XA", "XB"}
# Language codes that are placeholders, not languages ("Unknown language", "No linguistic content", ...).
NOT_LANGUAGES = {"und", "zxx", "mul", "mis"}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for the five files")
    parser.add_argument("--seed", type=int, default=13)
    parser.add_argument("--wordings", type=int, default=2, help="questions per (subject, relation)")
    parser.add_argument("--subjects", type=int, default=0, help="keep this many subjects per kind (0: all)")
    parser.add_argument("--split", default="70,10,20", help="train,validation,test percentages of the subjects")
    return parser.parse_args(argv)


def _locale(code: str):
    from babel import Locale, UnknownLocaleError

    try:
        return Locale.parse(code)
    except (UnknownLocaleError, ValueError):
        return None


def build_kb() -> tuple[list[tuple[str, str, str]], dict[str, list[str]]]:
    """(triples in a fixed order, id -> names with the English display name first)."""
    from babel import Locale
    from babel.core import get_global
    from babel.dates import get_timezone_location, get_timezone_name
    from babel.numbers import get_currency_name, get_currency_symbol

    en = Locale("en")
    names: dict[str, list[str]] = defaultdict(list)
    triples: list[tuple[str, str, str]] = []

    def name(entity: str, *values: str) -> None:
        for value in values:
            if value and value.casefold() not in {n.casefold() for n in names[entity]}:
                names[entity].append(value)

    def add(subject: str, relation: str, obj: str) -> None:
        triples.append((subject, relation, obj))

    territories = sorted(c for c in en.territories if c.isalpha() and len(c) == 2 and c not in NOT_PLACES)
    languages = get_global("territory_languages")
    currencies = get_global("territory_currencies")
    for code in territories:
        entity = f"territory/{code}"
        name(entity, en.territories[code])
        spoken = {
            lang: info
            for lang, info in languages.get(code, {}).items()
            if lang in en.languages and lang not in NOT_LANGUAGES
        }
        official = [
            lang for lang, info in spoken.items() if info["official_status"] in ("official", "de_facto_official")
        ]
        own = _locale(official[0]) if official else None
        for locale in [own, *map(_locale, ALIAS_LOCALES)]:
            if locale is not None and code in locale.territories:
                name(entity, locale.territories[code])
        for currency, _start, end, tender in currencies.get(code, ()):
            if end is None and tender and currency in en.currencies:
                add(entity, "territory.currency", f"currency/{currency}")
                add(f"currency/{currency}", "currency.territory", entity)
        for lang in official:
            add(entity, "territory.official_language", f"language/{lang}")
        for lang, info in spoken.items():
            if info["population_percent"] >= 5.0:
                add(entity, "territory.spoken_language", f"language/{lang}")
    for zone, code in sorted(get_global("zone_territories").items()):
        if code not in territories or zone.startswith("Etc/"):
            continue
        city = f"city/{zone}"
        # The city, without the region that CLDR puts before some ("Indiana/Indianapolis", "Argentina/Salta").
        name(city, get_timezone_location(zone, locale="en", return_city=True).split("/")[-1])
        add(city, "city.territory", f"territory/{code}")
        add(f"territory/{code}", "territory.city", city)
        metazone = get_global("meta_zones").get(zone)
        if metazone:
            add(city, "city.timezone", f"timezone/{metazone}")
            name(f"timezone/{metazone}", get_timezone_name(zone, "long", "generic", locale="en"))
            name(f"timezone/{metazone}", get_timezone_name(zone, "long", "standard", locale="en"))
    likely = get_global("likely_subtags")
    for lang in sorted(lang for lang in en.languages if "_" not in lang and lang not in NOT_LANGUAGES):
        parts = likely.get(lang, "").split("_")
        if len(parts) != 3 or parts[1] not in en.scripts or parts[2] not in territories:
            continue
        entity = f"language/{lang}"
        own = _locale(lang)
        name(entity, en.languages[lang], own.languages.get(lang) if own is not None else None)
        add(entity, "language.script", f"script/{parts[1]}")
        add(f"script/{parts[1]}", "script.language", entity)
        add(entity, "language.territory", f"territory/{parts[2]}")
        name(f"script/{parts[1]}", en.scripts[parts[1]])
    for currency in sorted({obj.split("/", 1)[1] for _, r, obj in triples if r == "territory.currency"}):
        entity = f"currency/{currency}"
        name(entity, en.currencies[currency], get_currency_name(currency, count=2, locale="en"))
        symbol = get_currency_symbol(currency, "en")
        if symbol != currency:
            add(entity, "currency.symbol", f"symbol/{symbol}")
            name(f"symbol/{symbol}", symbol)
    for code in territories:
        if not any(s == f"territory/{code}" for s, _, _ in triples):
            names.pop(f"territory/{code}", None)
    for entity in list(names):  # languages named by a territory's data but with no script or country of their own
        if entity.startswith("language/") and not names[entity]:
            names.pop(entity)
    for _, _, obj in triples:
        if obj.startswith("language/") and not names.get(obj):
            names[obj] = [en.languages[obj.split("/", 1)[1]]]
    return sorted(set(triples)), dict(names)


def strip_accents(text: str) -> str:
    return "".join(c for c in unicodedata.normalize("NFKD", text) if not unicodedata.combining(c))


def spelling(rng: random.Random, aliases: list[str]) -> str:
    """How a question names its subject: the English name mostly, else an alias, lowercased, without accents, or
    with one letter dropped."""
    name = aliases[0]
    draw = rng.random()
    if draw < 0.15:
        return rng.choice(aliases[1:]) if len(aliases) > 1 else name
    if draw < 0.25:
        return name.lower()
    if draw < 0.35:
        return strip_accents(name)
    if draw < 0.42 and len(name) >= 6:
        cut = rng.randrange(1, len(name) - 1)
        return name[:cut] + name[cut + 1 :]
    return name


def questions(triples, names, subjects: list[str], rng: random.Random, wordings: int, held_out: bool) -> list[dict]:
    """The questions about ``subjects``: ``wordings`` per (subject, relation), from the training wordings, or from
    the held-out ones."""
    answers: dict[tuple[str, str], list[str]] = defaultdict(list)
    for subject, relation, obj in triples:
        answers[subject, relation].append(obj)
    rows = []
    for subject in subjects:
        for relation, (_, templates) in RELATIONS.items():
            objects = answers.get((subject, relation))
            if not objects:
                continue
            pool = templates[-HELD_OUT:] if held_out else templates[:-HELD_OUT]
            for template in rng.sample(pool, min(wordings, len(pool))):
                question = template.format(spelling(rng, names[subject]))
                question = question[0].upper() + question[1:]
                if rng.random() < 0.2:
                    question = question.lower()
                rows.append({"question": question, "subject": subject, "relation": relation, "answers": objects})
    return rows


def write_jsonl(path: Path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows), encoding="utf-8")


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    try:
        import babel
    except ImportError:
        sys.exit("error: this script reads CLDR through babel: pip install 'plm_toolkit[kbqa-data]'")
    triples, names = build_kb()
    rng = random.Random(args.seed)
    kinds = {kind for kind, _ in RELATIONS.values()}
    subjects = {s for s, r, _ in triples if s.split("/", 1)[0] in kinds and names.get(s)}
    by_kind: dict[str, list[str]] = defaultdict(list)
    for subject in sorted(subjects):
        by_kind[subject.split("/", 1)[0]].append(subject)
    shares = [int(x) for x in args.split.split(",")]
    splits: dict[str, list[str]] = {"train": [], "validation": [], "test": []}
    for kind in sorted(by_kind):  # each kind split on its own, so every split asks about every kind
        chosen = by_kind[kind]
        rng.shuffle(chosen)
        if args.subjects:
            chosen = chosen[: args.subjects]
        first = round(len(chosen) * shares[0] / 100)
        second = first + round(len(chosen) * shares[1] / 100)
        for split, part in zip(splits, (chosen[:first], chosen[first:second], chosen[second:]), strict=True):
            splits[split] += sorted(part)
    if args.subjects:  # a small set: the triples of the kept subjects, and the names of what they mention
        kept = {s for part in splits.values() for s in part}
        triples = [t for t in triples if t[0] in kept]
        mentioned = {x for s, _, o in triples for x in (s, o)}
        names = {k: v for k, v in names.items() if k in mentioned}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "kb_triples.tsv").write_text("".join(f"{s}\t{r}\t{o}\n" for s, r, o in triples), encoding="utf-8")
    rows = [f"{entity}\t{n}\n" for entity in sorted(names) for n in names[entity]]
    (args.out / "kb_names.tsv").write_text("".join(rows), encoding="utf-8")
    sizes = {"triples": len(triples), "entities_with_names": len(names), "cldr": babel.core.get_global("cldr")}
    for split, part in splits.items():
        rows = questions(triples, names, part, rng, args.wordings, held_out=split == "test")
        write_jsonl(args.out / f"{split}.jsonl", rows)
        sizes[f"{split}_questions"] = len(rows)
        sizes[f"{split}_subjects"] = len(part)
    sizes["babel"] = babel.__version__
    print(json.dumps(sizes))
    return sizes


if __name__ == "__main__":
    main()
