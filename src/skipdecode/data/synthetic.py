"""The embedded ``synthetic`` dataset: an E2E-shaped data-to-text task generated from a seed.

Meaning representations (MRs) use E2E's slots, values and surface format
(``name[The Eagle], eatType[coffee shop], customer rating[3 out of 5], ...``). Each MR gets several
references from a small grammar that varies slot order, sentence aggregation (one or two
sentences), paraphrases per slot and pronoun use. Every reference realises every slot of its MR
and nothing else, so overlap metrics separate faithful outputs from poor ones.

Splits are disjoint by MR. Test MRs depend only on ``(seed, num_test)``, validation MRs on
``(seed, num_test, num_validation)``, so changing the train size never changes the eval sets.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

# Slot order and keys exactly as in the E2E CSVs (note the space in "customer rating").
SLOTS: tuple[str, ...] = (
    "name",
    "eatType",
    "food",
    "priceRange",
    "customer rating",
    "area",
    "familyFriendly",
    "near",
)
OPTIONAL_SLOTS: tuple[str, ...] = SLOTS[1:]

NAMES: tuple[str, ...] = (
    "Alimentum",
    "Aromi",
    "Bibimbap House",
    "Blue Spice",
    "Browns Cambridge",
    "Clowns",
    "Cocum",
    "Cotto",
    "Fitzbillies",
    "Giraffe",
    "Green Man",
    "Loch Fyne",
    "Midsummer House",
    "Strada",
    "Taste of Cambridge",
    "The Cambridge Blue",
    "The Cricketers",
    "The Dumpling Tree",
    "The Eagle",
    "The Golden Curry",
    "The Golden Palace",
    "The Mill",
    "The Olive Grove",
    "The Phoenix",
    "The Plough",
    "The Punter",
    "The Twenty Two",
    "The Vaults",
    "The Waterman",
    "The Wrestlers",
    "Travellers Rest Beefeater",
    "Wildwood",
    "Zizzi",
)
NEAR_NAMES: tuple[str, ...] = (
    "All Bar One",
    "Avalon",
    "Burger King",
    "Café Adriatic",
    "Café Brazil",
    "Café Rouge",
    "Café Sicilia",
    "Clare Hall",
    "Crowne Plaza Hotel",
    "Express by Holiday Inn",
    "Rainbow Vegetarian Café",
    "Raja Indian Cuisine",
    "Ranch",
    "The Bakers",
    "The Portland Arms",
    "The Rice Boat",
    "The Sorrento",
    "Yippee Noodle Bar",
)
SLOT_VALUES: Mapping[str, tuple[str, ...]] = {
    "name": NAMES,
    "eatType": ("coffee shop", "pub", "restaurant"),
    "food": ("Chinese", "English", "Fast food", "French", "Indian", "Italian", "Japanese"),
    "priceRange": ("cheap", "less than £20", "£20-25", "moderate", "high", "more than £30"),
    "customer rating": ("low", "average", "high", "1 out of 5", "3 out of 5", "5 out of 5"),
    "area": ("riverside", "city centre"),
    "familyFriendly": ("yes", "no"),
    "near": NEAR_NAMES,
}
# Probability weights for the number of optional slots (1..7), roughly E2E's distribution.
_NUM_OPTIONAL_WEIGHTS: tuple[int, ...] = (1, 3, 5, 6, 6, 4, 3)

MR = dict[str, str]


@dataclass(frozen=True)
class SyntheticConfig:
    """Sizes of the synthetic splits (in MRs) and references per MR (inclusive range)."""

    num_train: int = 1500
    num_validation: int = 100
    num_test: int = 200
    min_refs: int = 3
    max_refs: int = 5

    def __post_init__(self) -> None:
        for field in ("num_train", "num_validation", "num_test"):
            if getattr(self, field) < 0:
                raise ValueError(f"synthetic {field} must be >= 0, got {getattr(self, field)}")
        if not 1 <= self.min_refs <= self.max_refs:
            raise ValueError(
                f"synthetic refs per MR need 1 <= min_refs <= max_refs, "
                f"got min_refs={self.min_refs}, max_refs={self.max_refs}"
            )

    def size(self, split: str) -> int:
        return {"train": self.num_train, "validation": self.num_validation, "test": self.num_test}[
            split
        ]


# --------------------------------------------------------------------------------------------
# Meaning representations
# --------------------------------------------------------------------------------------------


def format_mr(mr: Mapping[str, str]) -> str:
    """Render an MR in E2E's format, slots in E2E's canonical order."""
    return ", ".join(f"{slot}[{mr[slot]}]" for slot in SLOTS if slot in mr)


def parse_mr(text: str) -> MR:
    """Parse an E2E-format MR string back into a slot -> value dict."""
    mr: MR = {}
    for part in text.split("], "):
        slot, _, value = part.partition("[")
        mr[slot.strip()] = value.rstrip("]")
    return mr


def random_mr(rng: random.Random) -> MR:
    """Draw one MR: ``name`` plus a random subset of the optional slots."""
    count = rng.choices(range(1, len(OPTIONAL_SLOTS) + 1), weights=_NUM_OPTIONAL_WEIGHTS)[0]
    chosen = rng.sample(OPTIONAL_SLOTS, count)
    mr: MR = {"name": rng.choice(NAMES)}
    for slot in OPTIONAL_SLOTS:
        if slot in chosen:
            values = SLOT_VALUES[slot]
            if slot == "near":
                values = tuple(v for v in values if v != mr["name"])
            mr[slot] = rng.choice(values)
    return mr


# --------------------------------------------------------------------------------------------
# Surface forms per slot value
# --------------------------------------------------------------------------------------------


def _food(value: str) -> str:
    return "fast food" if value == "Fast food" else value


def _food_phrase(value: str) -> str:
    return "fast food" if value == "Fast food" else f"{value} food"


_PRICE_VP: Mapping[str, tuple[str, ...]] = {
    "cheap": ("is cheap", "has cheap prices", "has a cheap price range", "offers cheap prices"),
    "moderate": ("is moderately priced", "has a moderate price range", "has moderate prices"),
    "high": ("is expensive", "has a high price range", "has high prices"),
    "less than £20": (
        "has a price range of less than £20",
        "costs less than £20",
        "has prices of less than £20",
    ),
    "£20-25": ("has a price range of £20-25", "costs £20-25", "has prices in the £20-25 range"),
    "more than £30": (
        "has a price range of more than £30",
        "costs more than £30",
        "has prices of more than £30",
    ),
}
_PRICE_PP: Mapping[str, tuple[str, ...]] = {
    "cheap": ("with cheap prices", "with a cheap price range"),
    "moderate": ("with moderate prices", "with a moderate price range"),
    "high": ("with high prices", "with a high price range"),
    "less than £20": ("with prices of less than £20", "with a price range of less than £20"),
    "£20-25": ("with prices of £20-25", "with a price range of £20-25"),
    "more than £30": ("with prices of more than £30", "with a price range of more than £30"),
}
_PRICE_ADJ: Mapping[str, tuple[str, ...]] = {
    "cheap": ("cheap",),
    "moderate": ("moderately priced",),
    "high": ("expensive", "high-priced"),
}
_RATING_ADJ: Mapping[str, tuple[str, ...]] = {
    "high": ("highly rated",),
    "low": ("low-rated",),
}
_FAMILY_VP: Mapping[str, tuple[str, ...]] = {
    "yes": ("is family-friendly", "is kid friendly", "is child friendly", "welcomes families"),
    "no": (
        "is not family-friendly",
        "is not kid friendly",
        "is not child friendly",
        "does not welcome families",
    ),
}
_FAMILY_PP: Mapping[str, tuple[str, ...]] = {
    "yes": ("suitable for families",),
    "no": ("not suitable for families",),
}

# Markers used to check faithfulness (see ``slot_markers``).
_FAMILY_MARKERS: Mapping[str, tuple[str, ...]] = {
    "yes": (
        "family-friendly",
        "kid friendly",
        "child friendly",
        "welcomes families",
        "suitable for families",
    ),
    "no": (
        "not family-friendly",
        "not kid friendly",
        "not child friendly",
        "does not welcome families",
        "not suitable for families",
    ),
}
_PRICE_MARKERS: Mapping[str, tuple[str, ...]] = {
    "cheap": ("cheap",),
    "moderate": ("moderate",),
    "high": ("high", "expensive"),
    "less than £20": ("less than £20",),
    "£20-25": ("£20-25",),
    "more than £30": ("more than £30",),
}


def slot_markers(slot: str, value: str) -> tuple[str, ...]:
    """Lower-cased strings of which at least one appears in every realisation of ``slot[value]``."""
    if slot == "eatType":
        return (value,)
    if slot == "food":
        return (_food(value).lower(),)
    if slot == "priceRange":
        return _PRICE_MARKERS[value]
    if slot == "familyFriendly":
        return _FAMILY_MARKERS[value]
    return (value.lower(),)


def _vp_options(slot: str, value: str) -> tuple[str, ...]:
    """Verb phrases (third person singular) realising a slot."""
    if slot == "eatType":
        return (f"is a {value}",)
    if slot == "food":
        food = _food_phrase(value)
        return (f"serves {food}", f"offers {food}", f"provides {food}")
    if slot == "priceRange":
        return _PRICE_VP[value]
    if slot == "customer rating":
        if "out of" in value:
            return (
                f"has a customer rating of {value}",
                f"is rated {value} by customers",
                f"has a rating of {value}",
            )
        article = _article(value)
        return (
            f"has {article} {value} customer rating",
            f"has {article} {value} rating",
            f"is rated {value} by customers",
        )
    if slot == "area":
        place = "the riverside area" if value == "riverside" else "the city centre"
        return (f"is in {place}", f"is located in {place}", f"can be found in {place}")
    if slot == "familyFriendly":
        return _FAMILY_VP[value]
    if slot == "near":
        return (f"is near {value}", f"is close to {value}", f"is located near {value}")
    raise KeyError(slot)


def _pp_options(slot: str, value: str) -> tuple[str, ...]:
    """Post-nominal modifiers realising a slot (``a pub <modifier>``)."""
    if slot == "food":
        food = _food_phrase(value)
        return (f"serving {food}", f"offering {food}")
    if slot == "priceRange":
        return _PRICE_PP[value]
    if slot == "customer rating":
        if "out of" in value:
            return (f"with a customer rating of {value}", f"rated {value} by customers")
        article = _article(value)
        return (f"with {article} {value} customer rating", f"with {article} {value} rating")
    if slot == "area":
        return (
            ("by the riverside", "in the riverside area")
            if value == "riverside"
            else (
                "in the city centre",
                "located in the city centre",
            )
        )
    if slot == "familyFriendly":
        return _FAMILY_PP[value]
    if slot == "near":
        return (f"near {value}", f"close to {value}", f"located near {value}")
    raise KeyError(slot)


def _adj_options(slot: str, value: str) -> tuple[str, ...]:
    """Pre-nominal adjectives realising a slot; empty when none reads naturally."""
    if slot == "food":
        return (_food(value),)
    if slot == "priceRange":
        return _PRICE_ADJ.get(value, ())
    if slot == "customer rating":
        return _RATING_ADJ.get(value, ())
    if slot == "familyFriendly":
        return ("family-friendly", "kid friendly") if value == "yes" else ()
    if slot == "area":
        return (value,)
    return ()


# Adjective order in an English noun phrase: price/quality before location before origin.
_ADJ_ORDER: tuple[str, ...] = ("priceRange", "customer rating", "familyFriendly", "area", "food")
_FRONTABLE: tuple[str, ...] = ("area", "near")


# --------------------------------------------------------------------------------------------
# Realisation
# --------------------------------------------------------------------------------------------


def _article(phrase: str) -> str:
    return "an" if phrase[:1].lower() in "aeio" else "a"


def _join(items: Sequence[str]) -> str:
    if len(items) <= 1:
        return "".join(items)
    return ", ".join(items[:-1]) + " and " + items[-1]


def _capitalise(text: str) -> str:
    return text[:1].upper() + text[1:]


def _first_sentence(mr: Mapping[str, str], slots: list[str], rng: random.Random) -> str:
    name = mr["name"]
    has_type = "eatType" in slots
    rest = [s for s in slots if s != "eatType"]
    if not has_type and rest and rng.random() < 0.5:
        # Purely verbal: "Blue Spice serves French food and is in the city centre."
        return f"{name} {_join([rng.choice(_vp_options(s, mr[s])) for s in rest])}."

    head = mr["eatType"] if has_type else rng.choice(("place", "venue"))
    adjective_slots = [s for s in rest if _adj_options(s, mr[s])]
    rng.shuffle(adjective_slots)
    adjective_slots = adjective_slots[: rng.choice((0, 1, 1, 2))]
    adjectives = [rng.choice(_adj_options(s, mr[s])) for s in _ADJ_ORDER if s in adjective_slots]
    noun = " ".join([*adjectives, head])
    noun_phrase = f"{_article(noun)} {noun}"

    remaining = [s for s in rest if s not in adjective_slots]
    fronted = None
    if remaining and remaining[0] in _FRONTABLE and rng.random() < 0.3:
        fronted = remaining.pop(0)
    modifiers, verbs = [], []
    for slot in remaining:
        if rng.random() < 0.5 and len(modifiers) < 2:
            modifiers.append(rng.choice(_pp_options(slot, mr[slot])))
        else:
            verbs.append(rng.choice(_vp_options(slot, mr[slot])))
    modifier_text = "".join(f" {m}" for m in modifiers)
    verb_text = _join(verbs)

    template = rng.choice(("copula", "copula", "there_is", "apposition"))
    if fronted is not None:
        template = "fronted"
    if template == "apposition" and not verbs:
        template = "copula"

    if template == "apposition":
        return f"{name}, {noun_phrase}{modifier_text}, {verb_text}."
    if template == "there_is":
        called = rng.choice(("called", "named"))
        sentence = f"There is {noun_phrase} {called} {name}{modifier_text}"
        return sentence + (f" that {verb_text}." if verbs else ".")
    sentence = f"{name} is {noun_phrase}{modifier_text}"
    if verbs:
        sentence += rng.choice((" that ", ", which ", " and ")) + verb_text
    if template == "fronted":
        assert fronted is not None
        lead = _capitalise(rng.choice(_pp_options(fronted, mr[fronted])))
        sentence = f"{lead}, {sentence}"
    return sentence + "."


def _second_sentence(mr: Mapping[str, str], slots: list[str], rng: random.Random) -> str:
    subjects = ["It", "It", mr["name"]]
    if "eatType" in mr:
        subjects += [f"The {mr['eatType']}", f"This {mr['eatType']}"]
    subject = rng.choice(subjects)
    return f"{subject} {_join([rng.choice(_vp_options(s, mr[s])) for s in slots])}."


def realise(mr: Mapping[str, str], rng: random.Random) -> str:
    """One reference text for ``mr``: one or two sentences mentioning every slot once."""
    slots = [s for s in OPTIONAL_SLOTS if s in mr]
    rng.shuffle(slots)
    if "eatType" in slots:  # the type is the head noun of the first sentence
        slots.remove("eatType")
        slots.insert(0, "eatType")
    split_at = len(slots)
    if len(slots) >= 3 and rng.random() < (0.8 if len(slots) >= 5 else 0.5):
        split_at = rng.randint(2 if slots[0] == "eatType" else 1, len(slots) - 1)
    text = _first_sentence(mr, slots[:split_at], rng)
    if split_at < len(slots):
        text += " " + _second_sentence(mr, slots[split_at:], rng)
    return text


def realisations(mr: Mapping[str, str], count: int, rng: random.Random) -> list[str]:
    """Up to ``count`` distinct realisations (fewer only if the grammar runs out)."""
    refs: list[str] = []
    for _ in range(count * 20):
        text = realise(mr, rng)
        if text not in refs:
            refs.append(text)
            if len(refs) == count:
                break
    return refs


# --------------------------------------------------------------------------------------------
# Splits
# --------------------------------------------------------------------------------------------

_SPLIT_ORDER: tuple[str, ...] = ("test", "validation", "train")


def generate_mrs(seed: int, config: SyntheticConfig) -> dict[str, list[MR]]:
    """MRs per split, disjoint across splits, each split from its own seeded stream."""
    taken: set[str] = set()
    result: dict[str, list[MR]] = {}
    for split in _SPLIT_ORDER:
        rng = random.Random(f"skipdecode-synthetic-{seed}-{split}-mrs")
        mrs: list[MR] = []
        attempts = 0
        while len(mrs) < config.size(split):
            attempts += 1
            if attempts > 100 * config.size(split) + 1000:
                raise ValueError(
                    f"synthetic: could not draw {config.size(split)} distinct {split} MRs; "
                    "lower num_train/num_validation/num_test"
                )
            mr = random_mr(rng)
            key = format_mr(mr)
            if key not in taken:
                taken.add(key)
                mrs.append(mr)
        result[split] = mrs
    return result


def generate_split(
    split: str, seed: int = 0, config: SyntheticConfig | None = None
) -> list[tuple[str, list[str]]]:
    """``(mr_text, references)`` pairs for one split; identical for identical arguments."""
    config = config or SyntheticConfig()
    if split not in _SPLIT_ORDER:
        raise ValueError(f"synthetic split={split!r} is unknown; allowed: train, validation, test")
    mrs = generate_mrs(seed, config)[split]
    rng = random.Random(f"skipdecode-synthetic-{seed}-{split}-refs")
    out = []
    for mr in mrs:
        count = rng.randint(config.min_refs, config.max_refs)
        out.append((format_mr(mr), realisations(mr, count, rng)))
    return out
