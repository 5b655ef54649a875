"""Writes the built-in pair sets (docs/pair-sets.md) from word lists whose French genders are known, with a fixed
seed, keeping the pairs whose two sentences the default checkpoint's tokenizer splits into as many pieces:

    .venv/bin/python scripts/make_pair_sets.py [--out transformer/analysis/interventions/sets]

antecedent: "The cat didn't cross the street because it was too tired/wide." il or elle, as the adjective says which
    noun "it" is (the animal or the place, of the other gender in French);
noun-gender: "My sister/brother is a doctor." Ma or Mon (His: Sa or Son), as the relative's gender says;
pronoun-gender: "She/He is tired." Elle or Il.
"""

from __future__ import annotations

import argparse
import random
from pathlib import Path

from transformer.analysis.interventions.pair_sets import Pair, pair_line
from transformer.io.checkpoint import DEFAULT_CHECKPOINT, load_checkpoint

SETS = Path(__file__).resolve().parents[1] / "transformer" / "analysis" / "interventions" / "sets"
SEED = 81
PAIRS_PER_SET = 120
PRONOUNS = {"m": "il", "f": "elle"}
# Nouns with their French gender.
ANIMALS = {
    "dog": "m",
    "cat": "m",
    "horse": "m",
    "bird": "m",
    "rabbit": "m",
    "wolf": "m",
    "bear": "m",
    "fox": "m",
    "cow": "f",
    "goat": "f",
    "mouse": "f",
    "turtle": "f",
    "frog": "f",
    "bee": "f",
    "spider": "f",
    "duck": "m",
}
PLACES = {
    "street": "f",
    "road": "f",
    "river": "f",
    "square": "f",
    "forest": "f",
    "bridge": "m",
    "field": "m",
    "garden": "m",
    "lake": "m",
    "park": "m",
    "path": "m",
    "canal": "m",
}
ANIMAL_ADJECTIVES = ["tired", "scared", "weak", "lazy", "slow", "sleepy"]  # what an animal is, not a place
PLACE_ADJECTIVES = ["wide", "long", "busy", "crowded", "deep", "narrow"]  # what a place is, not an animal
RELATIVES = [
    ("sister", "brother"),
    ("mother", "father"),
    ("aunt", "uncle"),
    ("daughter", "son"),
    ("wife", "husband"),
    ("grandmother", "grandfather"),
    ("niece", "nephew"),
    ("girlfriend", "boyfriend"),
    ("queen", "king"),
]
POSSESSIVES = {"My": {"f": "Ma", "m": "Mon"}, "His": {"f": "Sa", "m": "Son"}}
PROFESSIONS = [
    "a doctor",
    "a teacher",
    "a lawyer",
    "an engineer",
    "a writer",
    "a farmer",
    "a cook",
    "a pilot",
    "a student",
    "a dentist",
    "a singer",
    "a painter",
    "here",
    "at home",
    "very kind",
    "not here",
]
SUBJECTS = {"f": "She", "m": "He"}
PREDICATES = ["is tired.", "is happy.", "is sad.", "is ready.", "is late.", "is sick.", "is angry.", "is busy.",
              "was tired.", "was happy.", "was sad.", "was ready.", "was late.", "was sick.", "was angry.",
              "was busy.", "is very tired.", "is very happy.", "is not ready.", "was not ready.", "is small.",
              "is tall.", "was small.", "was tall.", "is young.", "was young.", "is old.", "was old.", "is alone.",
              "was alone.", "is strong.", "was strong.", "is lost.", "was lost.", "is married.", "was married.",
              "is French.", "was French.", "is American.", "was American.", "is hungry.", "was hungry.",
              "is cold.", "was cold.", "is rich.", "was rich.", "is poor.", "was poor.", "is sure.", "was sure.",
              "is free.", "was free.", "is wrong.", "was wrong.", "is right.", "was right.", "is afraid.",
              "was afraid.", "is bored.", "was bored."]  # fmt: skip


def drawn(rng: random.Random, sentence: str, sides: list[tuple[str, str, dict]], phenomenon: str) -> Pair:
    """`sentence` filled with one side's word against the other's, which side is clean drawn with the seed; a side
    is (its word, the target it makes the translation write, the roles of the clean sentence's words)."""
    (clean, target, roles), (corrupt, foil, _) = sides if rng.random() < 0.5 else sides[::-1]
    return Pair("", sentence.format(clean), sentence.format(corrupt), target, foil, phenomenon, None, roles)


def antecedent_pairs(rng: random.Random) -> list[Pair]:
    """Every animal and place of the other gender, each pair of adjectives: the clean sentence's adjective points
    "it" at the animal or at the place (as the seed draws), the corrupted one at the other."""
    pairs = []
    for animal, animal_gender in ANIMALS.items():
        for place, place_gender in PLACES.items():
            if animal_gender == place_gender:
                continue
            sentence = f"The {animal} didn't cross the {place} because it was too {{}}."
            roles = [{"differing": [10], "pronoun": [7], "antecedent": [i], "other_noun": [6 - i]} for i in (1, 5)]
            for animal_adjective, place_adjective in zip(ANIMAL_ADJECTIVES, PLACE_ADJECTIVES):
                sides = [
                    (animal_adjective, PRONOUNS[animal_gender], roles[0]),
                    (place_adjective, PRONOUNS[place_gender], roles[1]),
                ]
                pairs.append(drawn(rng, sentence, sides, "antecedent"))
    return pairs


def noun_gender_pairs(rng: random.Random) -> list[Pair]:
    """Each relative of each gender with each possessive and ending: the possessive agrees with the relative."""
    roles = {"differing": [1], "target_source": [0]}
    return [
        drawn(rng, f"{possessive} {{}} is {ending}.", [(female, forms["f"], roles), (male, forms["m"], roles)],
              "noun-gender")
        for female, male in RELATIVES
        for possessive, forms in POSSESSIVES.items()
        for ending in PROFESSIONS
    ]  # fmt: skip


def pronoun_gender_pairs(rng: random.Random) -> list[Pair]:
    """She or He with each predicate: Elle or Il."""
    pairs = []
    for predicate in PREDICATES:
        for clean_gender in ("f", "m"):
            other = "m" if clean_gender == "f" else "f"
            clean, corrupt = (f"{SUBJECTS[g]} {predicate}" for g in (clean_gender, other))
            target, foil = (PRONOUNS[g].capitalize() for g in (clean_gender, other))
            pairs.append(Pair("", clean, corrupt, target, foil, "pronoun-gender", None, {"differing": [0]}))
    rng.shuffle(pairs)
    return pairs


def same_pieces(tokenizer, pairs: list[Pair]) -> list[Pair]:
    """The pairs whose two sentences are split into as many pieces (patching compares the same positions)."""
    return [p for p in pairs if len(tokenizer.encode(p.clean)) == len(tokenizer.encode(p.corrupt))]


def built_in_sets() -> dict[str, list[Pair]]:
    """Each set's pairs, numbered: at most PAIRS_PER_SET of those of the same piece count, drawn with the seed."""
    tokenizer = load_checkpoint(DEFAULT_CHECKPOINT).tokenizer
    makers = {"antecedent": antecedent_pairs, "noun-gender": noun_gender_pairs, "pronoun-gender": pronoun_gender_pairs}
    sets = {}
    for name, make in makers.items():
        rng = random.Random(f"{SEED}-{name}")
        kept = same_pieces(tokenizer, make(rng))
        chosen = sorted(rng.sample(range(len(kept)), min(PAIRS_PER_SET, len(kept))))
        sets[name] = [
            Pair(f"{name}-{i:03d}", p.clean, p.corrupt, p.target, p.foil, p.phenomenon, p.step, p.roles)
            for i, p in enumerate(kept[j] for j in chosen)
        ]
    return sets


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=SETS, help="the folder the sets are written to")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    for name, pairs in built_in_sets().items():
        (args.out / f"{name}.jsonl").write_text("".join(pair_line(p) + "\n" for p in pairs))
        print(f"{name}: {len(pairs)} pairs")


if __name__ == "__main__":
    main()
