"""Prompts a draft is trained on: made from templates here, so they exist on any machine
and share no text with the benchmark sets (MT-bench, HumanEval, Spec-Bench) that the
project reports on. The target answers them; the draft learns the target's answers.

They cover the kinds of requests the benchmarks hold (writing, role-play, reasoning,
maths, code, extraction, STEM and humanities questions, translation, summaries, question
answering), each template filled with topics drawn with a fixed seed.
"""

from __future__ import annotations

import hashlib
import json
import random

TOPICS = [
    "volcanoes",
    "the water cycle",
    "honey bees",
    "the Roman Empire",
    "black holes",
    "photosynthesis",
    "the stock market",
    "climate change",
    "machine learning",
    "the human heart",
    "electric cars",
    "the French Revolution",
    "coral reefs",
    "vaccines",
    "the printing press",
    "solar panels",
    "chess",
    "the Silk Road",
    "earthquakes",
    "jazz music",
    "the immune system",
    "renewable energy",
    "ancient Egypt",
    "the internet",
    "rainforests",
    "the moon landing",
    "inflation",
    "bicycles",
    "the periodic table",
    "sleep",
    "coffee",
    "the Great Wall of China",
    "quantum computing",
    "urban gardening",
    "whales",
    "the Industrial Revolution",
    "social media",
    "recycling",
    "the Olympic Games",
    "glaciers",
    "democracy",
    "bread baking",
    "the Renaissance",
    "antibiotics",
    "wind turbines",
    "tea ceremonies",
    "the Amazon river",
    "robots",
    "meditation",
    "the Cold War",
    "dinosaurs",
    "public libraries",
    "space telescopes",
    "marathon running",
    "origami",
    "the theory of evolution",
    "cryptography",
    "volunteering",
    "the Moon",
    "hurricanes",
    "classical music",
    "video games",
    "nutrition",
]

CODE_TASKS = [  # none is a HumanEval task (tests/test_data.py checks against the installed set)
    "converts Celsius to Fahrenheit",
    "flattens a nested list",
    "merges two sorted lists into one sorted list",
    "sorts a list of dictionaries by a key",
    "counts the words in a text file",
    "computes the dot product of two vectors",
    "transposes a matrix given as a list of lists",
    "validates an email address with a regular expression",
    "groups words by their first letter",
    "splits a list into chunks of size n",
    "computes the Euclidean distance between two points",
    "parses the query parameters of a URL into a dict",
    "formats a number of seconds as hours, minutes and seconds",
    "reads a JSON file and returns its top-level keys",
    "computes compound interest over a number of years",
    "implements a stack class with push, pop and peek",
    "returns the extension of a file path",
    "converts a snake_case name to camelCase",
    "builds a dictionary from two lists of keys and values",
    "deep-merges two nested dictionaries",
    "reads a CSV file and sums one of its columns",
    "computes the area of a circle from its radius",
    "removes HTML tags from a string",
    "retries a function call up to three times on an exception",
    "returns the n most frequent words in a text",
    "checks whether a year is a leap year",
]

SENTENCES = [
    "The weather is lovely today and we are going to the park.",
    "Please send me the report before Friday afternoon.",
    "My grandmother grows tomatoes and beans in her garden.",
    "The train to the city leaves every twenty minutes.",
    "Learning a new language takes patience and practice.",
    "We watched a film about the ocean last night.",
    "The museum opens at nine and closes at five.",
    "He forgot his umbrella, so he got wet on the way home.",
]

TEMPLATES = {
    "writing": [
        "Write a short poem about {topic}.",
        "Write a blog post introduction about {topic}.",
        "Write a persuasive paragraph on why people should learn about {topic}.",
        "Write a short story for children that involves {topic}.",
        "Draft a polite email to a colleague proposing a workshop on {topic}.",
    ],
    "roleplay": [
        "Pretend you are a tour guide and describe {topic} to visitors.",
        "Act as a teacher and explain {topic} to a ten-year-old.",
        "Imagine you are a journalist interviewing an expert on {topic}. Ask three questions.",
    ],
    "reasoning": [
        "What are the pros and cons of {topic}? Think step by step.",
        "If {topic} disappeared tomorrow, what would change? Explain your reasoning.",
        "Compare {topic} with {topic2}. How are they similar and different?",
    ],
    "math": [
        "A shop sells {a} apples per day and each apple costs {b} cents. How much money does it make in {c} days?",
        "What is {a} multiplied by {b}, minus {c}? Show your steps.",
        "A train travels {a} kilometers in {b} hours. What is its average speed?",
        "Solve for x: {a}x + {b} = {c}.",
    ],
    "coding": [
        "Write a Python function that {task}.",
        "Write a Python function that {task}. Add a docstring and an example.",
        "Explain how to write a program that {task}, then give the code in Python.",
    ],
    "extraction": [
        "List the key facts about {topic} as bullet points.",
        "Extract three keywords that describe {topic} and explain each.",
    ],
    "stem": [
        "Explain how {topic} works.",
        "What is the science behind {topic}?",
        "Describe the main components of {topic}.",
    ],
    "humanities": [
        "What is the history of {topic}?",
        "Why is {topic} important to society?",
        "Discuss the cultural impact of {topic}.",
    ],
    "translation": [
        "Translate the following sentence into French: {sentence}",
        "Translate the following sentence into German: {sentence}",
        "Translate into Spanish: {sentence}",
    ],
    "summarization": [
        "Summarize in two sentences what you know about {topic}.",
        "Give a one-paragraph summary of {topic} for a busy reader.",
    ],
    "qa": [
        "What is {topic}?",
        "Who first studied {topic} and when?",
        "Where can I learn more about {topic}?",
        "How does {topic} affect everyday life?",
    ],
}

FOLLOW_UPS = [
    "Now make it shorter.",
    "Can you give an example?",
    "Explain that more simply.",
    "Rewrite your answer as a list.",
    "What is the most important point?",
]


def training_prompts(n: int, seed: int = 0, second_turn_share: float = 0.25) -> list[list[str]]:
    """``n`` prompts (each a list of user turns), categories in turn, topics at random."""
    if not isinstance(n, int) or n < 1:
        raise ValueError(f"number of training prompts must be an integer >= 1, got {n!r}")
    rng = random.Random(seed)
    cats = list(TEMPLATES)
    seen: set[str] = set()
    out: list[list[str]] = []
    i = 0
    while len(out) < n and i < 50 * n:
        template = rng.choice(TEMPLATES[cats[i % len(cats)]])
        i += 1
        text = template.format(
            topic=rng.choice(TOPICS),
            topic2=rng.choice(TOPICS),
            task=rng.choice(CODE_TASKS),
            sentence=rng.choice(SENTENCES),
            a=rng.randint(2, 99),
            b=rng.randint(2, 99),
            c=rng.randint(2, 99),
        )
        if text in seen:
            continue
        seen.add(text)
        turns = [text]
        if rng.random() < second_turn_share:
            turns.append(rng.choice(FOLLOW_UPS))
        out.append(turns)
    return out


def prompt_list_key() -> str:
    """A hash of the lists the prompts are made from: a cached corpus names the list it answered."""
    what = [TOPICS, CODE_TASKS, SENTENCES, TEMPLATES, FOLLOW_UPS]
    return hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()[:12]
