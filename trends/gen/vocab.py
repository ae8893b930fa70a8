"""A deterministic multilingual hashtag vocabulary: tag number -> spelling."""

from __future__ import annotations

HEAD = [
    "WorldCup", "news", "music", "Café", "Straße", "サッカー", "Москва", "كرة_القدم", "케이팝",
    "BlackFriday", "AI", "climate", "Fußball", "música", "東京", "Olympics", "election", "K_Drama",
    "recipe", "travel",
]

# Syllable sets per script; sets are disjoint after normalisation so every number is one key.
_SCRIPTS = [
    ["ka", "lo", "mi", "ne", "ru", "ta", "vi", "zo", "pe", "bu", "da", "fo", "gi", "ha", "ju", "wa"],
    ["ñá", "ré", "lí", "mó", "tú", "çe", "gá", "dé", "ní", "pó", "vú", "bá", "fé", "jí", "hó", "zú"],
    ["カ", "キ", "ク", "ケ", "コ", "サ", "シ", "ス", "タ", "チ", "ツ", "ナ", "ニ", "ヌ", "ハ", "ヒ"],
    ["ба", "ве", "ги", "до", "жу", "зы", "ка", "ле", "ми", "но", "пу", "ры", "са", "те", "фи", "хо"],
    ["با", "تي", "جو", "دا", "ري", "سو", "شا", "عي", "فو", "قا", "كي", "لو", "ما", "ني", "هو", "يا"],
    ["가", "나", "다", "라", "마", "바", "사", "아", "자", "차", "카", "타", "파", "하", "거", "너"],
]


def tag_for(number: int) -> str:
    """The spelling of tag `number` (0 = most popular): a head word, else syllables of a script."""
    if number < len(HEAD):
        return HEAD[number]
    rest = number - len(HEAD)
    script = _SCRIPTS[rest % len(_SCRIPTS)]
    value = rest // len(_SCRIPTS)
    parts = [script[value % 16]]
    value //= 16
    while value:
        parts.append(script[value % 16])
        value //= 16
    # Two syllables at least, and a script marker for Latin so keys never collide with HEAD.
    word = "".join(parts) + (script[0] if len(parts) == 1 else "")
    return word


def display_variant(spelling: str, roll: float) -> str:
    """Occasionally vary the case, as people do; the counting key stays the same."""
    if roll < 0.1:
        return spelling.upper()
    if roll < 0.2:
        return spelling.lower()
    return spelling
