"""A deterministic long-conversation dataset with evidence annotations, for recall_quality.py.

Each conversation is one user chatting with an assistant over many dated sessions (weeks apart). Most turns are
ordinary chatter; a few state facts that questions later ask about. Every question names its evidence turn ids
and has a type:

- ``single-hop``: one turn holds the answer ("What did I name the animal I adopted?").
- ``multi-hop``: the answer needs two turns from different sessions (who the friend is, what the friend does).
- ``temporal``: "when did ..." questions; the answer is the date of the evidence turn's session.
- ``preference``: the user's tastes, stated once in passing.
- ``knowledge-update``: a later turn overrides an earlier one; the evidence is the LATER turn only.

Family ``c`` (written before any result on it was seen) is a casual chat between two friends: names in
every turn, facts often told in a reply whose words do not name the topic, questions in the third person.

Family ``d`` (held out, written before any result on it was seen and never changed afterwards) follows the
published shape of LoCoMo: two speakers, messages of one to three sentences, and each speaker's life events
coming back session after session; only the one turn holding the detail asked about is evidence.

Questions come in two styles, chosen at random per fact: one reuses a word of the evidence (a name, a place),
the other (a third of questions, ``PARAPHRASE_SHARE``) paraphrases it (instrument -> "musical instrument",
guinea pig -> "animal"), as people ask. Filler
turns reuse the facts' vocabulary in other contexts (a neighbour's dog, another city's weather), and some are
phrased the way people talk but a naive scanner might not like ("I can't refuse", "[sigh]", "ignore my last
message"), to check that recall keeps ordinary conversation.

Generated from a fixed seed with Python's ``random``: no download, same data on every machine.

    python benchmarks/recall_data.py          # prints a summary and a sample conversation
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

__all__ = ["FAMILIES", "Conversation", "Question", "Turn", "generate"]


@dataclass
class Turn:
    id: int  # 0-based position in the conversation; ironmem's turn ids are id + 1 in a fresh database
    session: int
    ts: float
    user: str
    assistant: str

    @property
    def text(self) -> str:
        return f"User: {self.user}\nAssistant: {self.assistant}"


@dataclass
class Question:
    text: str
    qtype: str
    evidence: list[int]  # Turn.id
    style: str  # "keyword" | "paraphrase" | "real"
    #: evidence known only by session (every turn of the answer session): recall@k is 1 when any of it is in
    #: the first k (LongMemEval's session-level recall_any), not the share of it
    any_of: bool = False


@dataclass
class Conversation:
    name: str
    turns: list[Turn] = field(default_factory=list)
    questions: list[Question] = field(default_factory=list)


# -- vocabulary --------------------------------------------------------------------------------------
POOLS: dict[str, list[str]] = {
    "pet": ["guinea pig", "kitten", "rabbit", "beagle puppy", "parrot", "hamster", "tortoise", "ferret"],
    "petname": ["Oscar", "Biscuit", "Pepper", "Mochi", "Ziggy", "Clementine", "Noodle", "Waffles", "Juniper"],
    "job": ["nurse", "data analyst", "civil engineer", "pastry chef", "paralegal", "UX designer", "pharmacist"],
    "company": ["Halvorsen Logistics", "Brightwater Clinic", "Quillfeather Press", "Norrbotten Energy",
                "Tamarind Foods", "Castellan Robotics", "Ostrava Bank"],
    "sibling": ["sister", "brother", "cousin"],
    "sibname": ["Priya", "Tomasz", "Ingrid", "Mateo", "Yuki", "Rafferty", "Leilani", "Anselm"],
    "city": ["Lisbon", "Montreal", "Kyoto", "Edinburgh", "Valparaiso", "Tbilisi", "Ljubljana", "Hobart", "Porto",
             "Denver", "Austin", "Wellington"],
    "instrument": ["violin", "cello", "ukulele", "trumpet", "piano", "drums", "clarinet"],
    "teacher": ["Mrs. Abernathy", "Mr. Okafor", "Ms. Lindqvist", "Mr. Castellanos", "Ms. Varga"],
    "allergen": ["shellfish", "peanuts", "sesame", "kiwi", "gluten", "walnuts"],
    "car": ["Subaru Outback", "Honda Civic", "Volvo estate", "Toyota Prius", "Mazda hatchback"],
    "color": ["dark green", "silver", "bright red", "navy blue", "white"],
    "book": ["The Overstory", "Piranesi", "Station Eleven", "Klara and the Sun", "The Remains of the Day"],
    "author": ["Richard Powers", "Susanna Clarke", "Emily St. John Mandel", "Kazuo Ishiguro"],
    "friend": ["Marisol", "Dagny", "Henrike", "Oluwaseun", "Beatriz", "Siobhan", "Annika"],
    "friend2": ["Kwame", "Lorenzo", "Tobias", "Farid", "Casimir", "Desmond"],
    "gift": ["hand-thrown ceramic mug", "silk scarf", "telescope", "vintage record player", "sourdough starter kit"],
    "doc": ["Nakamura", "Okonkwo", "Fitzgerald", "Herrera", "Lindgren"],
    "thing": ["caffeine", "salt", "sugar", "screen time before bed", "red meat"],
    "plant": ["orchid", "jasmine", "lemon tree", "hibiscus", "bougainvillea"],
    "diet": ["vegetarian", "vegan", "pescatarian"],
    "coffee": ["black with no sugar", "as an oat milk flat white", "with a splash of cream and cinnamon"],
    "genre": ["lo-fi hip hop", "baroque music", "ambient electronica", "old jazz records"],
    "travelpref": ["hiking in the mountains", "on a quiet cabin trip in the woods", "on a city break with museums"],
    "team": ["the Seattle Sounders", "Borussia Dortmund", "the Chicago Cubs", "Celtic", "the Boston Celtics"],
    "movie": ["Spirited Away", "Casablanca", "The Grand Budapest Hotel", "Alien", "Amelie"],
    "place": ["Iceland", "Morocco", "Vietnam", "the Azores", "Patagonia", "Sicily"],
    "race": ["half marathon", "10k trail race", "triathlon sprint"],
    "band": ["Radiohead", "Khruangbin", "Fleetwood Mac tribute band", "Arctic Monkeys", "Bonobo"],
    "job2": ["firefighter", "veterinarian", "airline pilot", "marine biologist", "tattoo artist"],
    "event": ["his wedding", "a salsa night", "a board game evening", "his housewarming party"],
    "condition": ["an ear infection", "a sprained paw", "dental problems", "a skin allergy"],
    "month": ["March", "June", "September", "November"],
    "boss": ["Gwendolyn", "Rashid", "Margarethe", "Thaddeus", "Constance", "Ignatius"],
    "phone": ["a Pixel", "an iPhone", "a Fairphone", "a Galaxy"],
    "km": ["15", "20", "25", "30", "35", "40"],
    "club": ["chess", "climbing", "book", "running", "photography"],
    "weekday": ["Tuesday", "Wednesday", "Thursday"],
    "venue": ["the old library annex", "a bouldering gym downtown", "the community hall on Elm Street"],
}

ACKS = ["That's great news!", "Oh nice, thanks for telling me.", "Good to know, I'll keep that in mind.",
        "Wow, how exciting.", "That sounds lovely.", "Congratulations!", "Noted!", "Sounds like a big change."]

# (type, [statement turns: (user, assistant)], [keyword question, paraphrase question]); a fact with two statements
# is multi-hop (both are evidence) or knowledge-update (the second overrides the first and is the only evidence).
FACTS: list[tuple[str, list[tuple[str, str]], list[str]]] = [
    ("single-hop", [("I finally adopted a {pet} from the shelter! We named her {petname}.", "{ack} {petname} is a lovely name.")],
     ["What is the name of my {pet}?", "What did I name the animal I adopted?"]),
    ("single-hop", [("I got the job! I'm starting as a {job} at {company} next month.", "{ack} What will your first week look like?")],
     ["Where am I going to work as a {job}?", "Which employer hired me recently?"]),
    ("single-hop", [("My {sibling} {sibname} just moved to {city} for grad school.", "{ack} Is {sibname} enjoying it?")],
     ["Which city did {sibname} move to?", "Where is my {sibling} studying these days?"]),
    ("single-hop", [("I started taking {instrument} lessons, my teacher is {teacher}.", "{ack} Practising every day helps.")],
     ["Who is my {instrument} teacher?", "What musical instrument am I learning to play?"]),
    ("single-hop", [("Turns out I'm allergic to {allergen}, the clinic confirmed it.", "Good that you know now. Read labels carefully.")],
     ["What am I allergic to?", "Which food makes me sick and should be avoided?"]),
    ("single-hop", [("We bought a used {car} last weekend, it's {color}.", "{ack} Enjoy the road trips.")],
     ["What color is our {car}?", "What kind of vehicle did we purchase?"]),
    ("single-hop", [("I'm reading {book} by {author} and I can't put it down.", "It's a wonderful book.")],
     ["Who wrote {book}?", "Which novel have I been enjoying lately?"]),
    ("single-hop", [("For {friend}'s birthday I gave her a {gift}.", "What a thoughtful present.")],
     ["What did I give {friend} for her birthday?", "What present did I choose for my friend?"]),
    ("single-hop", [("Dr. {doc} told me I should cut back on {thing}.", "That's sensible advice, small steps help.")],
     ["What did Dr. {doc} recommend?", "What did my physician tell me to reduce?"]),
    ("single-hop", [("The {plant} on my balcony finally bloomed this week.", "{ack} Must smell wonderful.")],
     ["Did my {plant} bloom?", "Which of my plants flowered?"]),
    ("preference", [("I've been {diet} for three years now, so no meat for me at the barbecue.", "I'll suggest some grilled vegetable ideas.")],
     ["Am I {diet}?", "What kind of diet do I follow?"]),
    ("preference", [("I always take my coffee {coffee}.", "Got it.")],
     ["How do I take my coffee?", "What's my usual morning drink order?"]),
    ("preference", [("Honestly {genre} is the only thing I can listen to while working.", "It does help with focus.")],
     ["Do I like {genre}?", "What music helps me concentrate?"]),
    ("preference", [("I hate crowded beaches, I'd much rather go {travelpref}.", "Quieter trips can be more restful.")],
     ["Do I like crowded beaches?", "What kind of vacation do I prefer?"]),
    ("preference", [("I've supported {team} since I was a kid.", "Loyal fan!")],
     ["How long have I supported {team}?", "Which sports team do I cheer for?"]),
    ("preference", [("My favourite film of all time is {movie}.", "Great choice.")],
     ["What do I think of {movie}?", "Which movie do I love the most?"]),
    ("temporal", [("Just got back from {place}, the trip was amazing.", "Welcome back! What was the highlight?")],
     ["When did I go to {place}?", "When did I return from my last trip abroad?"]),
    ("temporal", [("I ran my first {race} this morning!", "{ack} How do your legs feel?")],
     ["When did I run the {race}?", "When did I finish my first race?"]),
    ("temporal", [("Had my wisdom teeth removed today, my face is so swollen.", "Ice packs and soft food for a few days.")],
     ["When did I get my wisdom teeth removed?", "When was my dental surgery?"]),
    ("temporal", [("Saw {band} live tonight, best concert ever.", "{ack} What did they play?")],
     ["When did I see {band} live?", "When did I last go to a gig?"]),
    ("multi-hop", [("My friend {friend2} works as a {job2}.", "That must be an interesting job."),
                   ("{friend2} invited me to {event} next week.", "Sounds fun, enjoy it.")],
     ["What does {friend2}, who invited me to {event}, do for work?", "What is the profession of the friend who invited me to {event}?"]),
    ("multi-hop", [("We adopted a {pet} and called her {petname}.", "{ack}"),
                   ("Took {petname} to the vet today, she has {condition}.", "Poor thing, I hope she recovers quickly.")],
     ["What health problem does my {pet} {petname} have?", "What did the vet find wrong with my {pet}?"]),
    ("multi-hop", [("My {sibling} {sibname} lives in {city} now.", "Nice, do you visit often?"),
                   ("I'm flying out to see {sibname} in {month}.", "Have a great trip.")],
     ["Which city am I flying to in {month}?", "Where will I travel in {month} to visit family?"]),
    ("multi-hop", [("I joined the {club} club at work.", "{ack}"),
                   ("The {club} club meets every {weekday} at {venue}.", "Handy to have a fixed day.")],
     ["Where and when does my {club} club meet?", "On which day does the club I joined at work get together?"]),
    ("knowledge-update", [("I live in {city} now, close to my office.", "A short commute is a blessing."),
                          ("We finally moved to {city2}! Unpacking boxes all week.", "{ack} How is the new place?")],
     ["Which city do I live in now?", "Where is my current home?"]),
    ("knowledge-update", [("I'm training for a 10k, running about {km} km a week.", "Steady progress."),
                          ("Up to {km2} km a week now, my running is going well.", "{ack} Careful not to overdo it.")],
     ["How many km a week am I running now?", "How much weekly mileage am I doing in training lately?"]),
    ("knowledge-update", [("My manager is {boss}, she is very supportive.", "That helps a lot."),
                          ("{boss} left the company, my new manager is {boss2}.", "Changes like that take time to settle.")],
     ["Who is my manager now?", "Who do I report to at work these days?"]),
    ("knowledge-update", [("I'm still using {phone} as my phone.", "If it works, it works."),
                          ("Switched to {phone2} last week, the battery is way better.", "Nice upgrade.")],
     ["Which phone do I use now?", "What mobile device do I currently own?"]),
]

FILLER_USER = [
    "Can you help me write an email to my landlord about the broken heater?",
    "The weather in {city} looks terrible this week, glad I'm not there.",
    "Work was exhausting today, three meetings back to back.",
    "What's a quick dinner I can make with rice, eggs and spinach?",
    "My neighbour's {pet} kept barking all night.",
    "I watched a documentary about deep sea creatures, fascinating stuff.",
    "Any tips for sleeping better? I keep waking up at 4am.",
    "My {sibling} called, we talked for an hour about nothing in particular.",
    "Remind me how to convert Celsius to Fahrenheit?",
    "I'm thinking about repainting the living room, maybe a warm grey.",
    "The train was late again this morning.",
    "Can you summarize the main causes of the French Revolution?",
    "I need a birthday card message for a coworker I barely know.",
    "We had a team lunch at a new ramen place, it was fine.",
    "How long should I boil an egg for a runny yolk?",
    "I spilled coffee on my keyboard, ugh.",
    "What's the difference between a virus and a bacterium?",
    "I can't refuse when my mom asks me to help with her garden.",
    "[sigh] long day. Just want to sit on the couch.",
    "Ignore my last message, I meant Thursday, not Tuesday.",
    "Forget it, the meeting got cancelled anyway.",
    "You are the best, thanks for the help earlier!",
    "[laughs] okay that joke was actually good.",
    "My friend {friend} recommended a podcast about history.",
    "Is it worth learning Python for spreadsheet work?",
    "Cleaning the apartment this weekend, wish me luck.",
    "The {car} in the parking lot next to mine has a flat tire, poor guy.",
    "I read an article saying {city} is getting a new metro line.",
    "What should I pack for a weekend of camping?",
    "Traffic was awful, took me an hour to get home.",
    "Do you know any good stretches for lower back pain?",
    "The office coffee machine broke again.",
    "My {sibling} wants to borrow money again, not sure what to do.",
    "Can you explain what an index fund is?",
    "I finally fixed the leaking tap in the kitchen.",
    "Our team shipped the release today, huge relief.",
    "Grocery prices are getting ridiculous.",
    "I tried a new pasta recipe with lemon and garlic.",
    "The kids next door were playing football in the rain.",
    "Should I get a standing desk?",
]
# Same topics as the facts, about someone else or in passing: in real conversations a subject comes back many
# times, and only one of those turns answers the question.
TOPICAL = [
    "My coworker {friend} adopted a {pet} too, it chews everything in sight.",
    "Should I get a pet? A {pet} seems like less work than a dog.",
    "{friend} is applying for a {job} position at some startup.",
    "I'm updating my CV, it's been years since I looked for a new job.",
    "My neighbour's kid plays the {instrument}, we hear it through the wall every evening.",
    "{friend} is allergic to cats so we never meet at my place.",
    "My dad keeps talking about buying a {car}.",
    "{friend} keeps recommending {book} to me, I haven't started it.",
    "I need to book a checkup, I haven't seen a doctor in ages.",
    "I should buy my mom a {plant} for her garden.",
    "Should I try going {diet} for a month? Curious how it would feel.",
    "I ran out of coffee beans this morning, terrible start.",
    "The radio at the gym only plays {genre}, it drives me mad.",
    "{friend} spent her holiday on a crowded beach in Spain.",
    "Did you see the {team} game? What a mess.",
    "We watched {movie} on movie night, {friend} fell asleep halfway.",
    "{friend} is planning a trip to {place} next spring.",
    "I signed up for a spin class, my legs are dead.",
    "My dentist appointment got moved to next month.",
    "{friend} got tickets to see {band}, I'm a bit jealous.",
    "My friend {friend2} is thinking about changing careers.",
    "I'm thinking of joining a {club} club, any tips?",
    "Apartment hunting is exhausting, prices in {city} are crazy.",
    "My phone screen cracked, I might need a new one.",
    "Our team got a new director, nobody knows her yet.",
    "{friend} flew to {city} last month for a conference.",
]
ASIDES = [
    "Long week.", "Anyway, unrelated, the heating is broken again.", "Also it rained all day here.",
    "Work has been hectic though.", "Otherwise not much news.", "My knee is still sore from football.",
    "I still need to do the laundry tonight.", "Oh and the landlord finally replied.",
    "Honestly I'm tired but happy.", "Tomorrow is going to be busy.",
]

FILLER_ASSISTANT = [
    "Sure, here's a short draft you can adapt.", "That sounds frustrating.", "Here are a few ideas.",
    "Happy to help with that.", "Good question! In short, it depends on a few things.", "Oh no, sorry to hear that.",
    "That's a nice way to spend the evening.", "Hope the rest of the week is calmer.", "Let me know how it goes.",
    "Here's a quick summary.", "Ha, glad you liked it.", "Understood.",
]


# -- family "b": held out by source ------------------------------------------------------------------
# Other templates for the same kinds of fact, written separately from family "a" and never looked at while
# choosing any ranking or fusion parameter: terser, chattier statements (the fact often in a subordinate clause),
# questions worded as a user asks them mid-task ("remind me ...", "...?  I forgot"), its own filler and asides.
# Reported apart from family "a" by ``recall_quality.py --family b``.
FACTS_B: list[tuple[str, list[tuple[str, str]], list[str]]] = [
    ("single-hop", [("ok so the shelter let us take the {pet} home, the kids insisted on calling her {petname}", "{ack} Give {petname} a few days to settle.")],
     ["remind me, what's my {pet} called again?", "what name did we give the new family pet?"]),
    ("single-hop", [("signed the contract today, {company} is taking me on as their new {job}", "{ack} When do you start?")],
     ["which company is hiring me as a {job}?", "who is my new employer going to be?"]),
    ("single-hop", [("{sibname} (my {sibling}) got into a master's programme and relocated to {city}", "{ack}")],
     ["where did {sibname} relocate to?", "which city does my {sibling} study in?"]),
    ("single-hop", [("first {instrument} class went ok, {teacher} says my posture is awful lol", "Everyone starts there.")],
     ["what's the name of the person teaching me {instrument}?", "which instrument did I take up?"]),
    ("single-hop", [("blood test results: {allergen} allergy. so that explains the rashes", "Glad you have an answer.")],
     ["remind me what I can't eat because of the allergy test", "what did the blood test say I react to?"]),
    ("single-hop", [("picked up a second-hand {car} on saturday, {color} paint, runs great", "{ack}")],
     ["what colour is the {car} we got?", "what car did we end up buying?"]),
    ("single-hop", [("halfway through {book}, {author} really knows how to write trees and people", "It's a great one.")],
     ["who's the author of {book} again?", "what book am I halfway through?"]),
    ("single-hop", [("{friend} loved the {gift} I got her for her birthday", "What a nice gift.")],
     ["what did I get {friend} as a birthday present?", "which birthday gift did my friend love?"]),
    ("single-hop", [("saw Dr. {doc} this morning, apparently I need to go easy on {thing}", "Small changes add up.")],
     ["what does Dr. {doc} want me to go easy on?", "what did the doctor say I should have less of?"]),
    ("preference", [("not eating meat has been easy honestly, three years {diet} and counting", "Impressive consistency.")],
     ["am I still {diet}?", "any dietary restrictions I should keep in mind for the dinner party?"]),
    ("preference", [("coffee order for the record: {coffee}, always", "Noted.")],
     ["how do I like my coffee?", "what should you order for me at the cafe?"]),
    ("preference", [("put on {genre} and I can focus for hours", "Whatever keeps you in the zone.")],
     ["what do I listen to to focus?", "what should I play during a long work session?"]),
    ("preference", [("beaches full of people are my nightmare, give me a trip {travelpref} any day", "Fair.")],
     ["what kind of trip would I enjoy?", "should I book a busy beach resort for my holiday?"]),
    ("preference", [("{movie} is the one film I could rewatch forever", "A classic.")],
     ["which film could I rewatch forever?", "what's my all-time favourite movie?"]),
    ("temporal", [("home from {place} last night, jet lag is brutal", "Welcome home! Rest up.")],
     ["when was I in {place}?", "when did I come back from my holiday abroad?"]),
    ("temporal", [("crossed the finish line of my first {race}!!", "{ack} Well done!")],
     ["when did I do my first {race}?", "when did I complete my first race?"]),
    ("temporal", [("went to the {band} show tonight, my ears are still ringing", "Sounds like a great night.")],
     ["when did I see {band}?", "when was the last concert I went to?"]),
    ("multi-hop", [("{friend2}'s a {job2} by the way, in case that comes up", "Good to know."),
                   ("{friend2} asked me to {event} next weekend", "Sounds fun.")],
     ["what does {friend2} do for a living? he's the one who asked me to {event}", "what job does the friend who invited me to {event} have?"]),
    ("multi-hop", [("{sibname} has been living in {city} for a while now", "Nice."),
                   ("booked flights to visit {sibname} in {month}", "Enjoy the trip.")],
     ["where am I flying in {month}?", "which city will I be in during {month}?"]),
    ("knowledge-update", [("my commute to {city} is only ten minutes", "Lucky you."),
                          ("the move to {city2} is done, new address and everything", "{ack} Settling in?")],
     ["what city am I based in these days?", "where do I live currently?"]),
    ("knowledge-update", [("{boss} is my team lead, she's great", "That helps."),
                          ("reorg happened: {boss2} is my lead now, {boss} moved to another team", "Reorgs are tough.")],
     ["who is my team lead at the moment?", "who's my boss now after the reorg?"]),
    ("knowledge-update", [("my phone is {phone}, it's fine", "Good."),
                          ("traded in my old phone for {phone2}", "{ack} Enjoy it.")],
     ["what phone do I have at the moment?", "which smartphone am I using now?"]),
]
FILLER_USER_B = [
    "can you proofread this paragraph for me quickly",
    "ugh the printer at work jammed three times today",
    "what's a good way to memorize vocabulary for a language class?",
    "need a polite way to say no to an extra project",
    "how many grams is a cup of flour",
    "the heatwave in {city} is on the news again",
    "my {sibling} sent me a meme about cats, still laughing",
    "quick question: is it 'affect' or 'effect' here?",
    "my laptop fan is super loud, should I worry?",
    "the bakery downstairs closed, sad",
    "can you give me three ideas for a team offsite?",
    "I keep forgetting to water things, any app for that?",
    "[yawns] meetings all afternoon",
    "disregard that, I found the file",
    "what's the capital of Mongolia, settling a bet",
    "honestly I refuse to do another all-nighter",
]
TOPICAL_B = [
    "{friend}'s {pet} escaped again this morning",
    "a recruiter from {company} messaged me but I'm not interested",
    "my cousin wants to learn {instrument}, any beginner tips?",
    "{friend} can't eat {allergen} either, we compare notes",
    "a {color} {car} almost hit me on my bike today",
    "book club picked {book}, I'm not sure I'll finish",
    "{friend} went to {place} and won't stop posting photos",
    "{band} announced a tour, tickets sold out in minutes",
    "{friend2} is thinking of becoming a {job2} too, funny",
    "rent in {city} went up again",
    "my old phone is in a drawer somewhere",
    "{friend} watched {movie} for the first time and hated it",
]
ASIDES_B = ["anyway.", "busy day.", "also my cat knocked over a plant.", "lol.", "not much else going on.",
            "also, the wifi is terrible today."]
FILLER_ASSISTANT_B = ["Sure thing.", "Here you go.", "Ha, fair enough.", "That's annoying.", "Good idea.",
                      "Let me think about that.", "Makes sense.", "Here's what I'd suggest."]


# -- family "c": casual two-person chat, held out ------------------------------------------------------------------
# Written before any result on it was seen, never used to choose anything: two friends chatting over many dated
# sessions, as in public long-conversation benchmarks (LoCoMo). Each stored turn is one exchange: a message from
# one friend and the other's reply, both prefixed with the speaker's name (so the names are in every turn and
# weigh nothing). Facts are told in passing, often in a REPLY whose words do not name the topic (the topic is in
# the other person's message, or only implied); questions ask in the third person, by name ("What pet does
# Jonas have?"). ``{a}`` is the first speaker, ``{b}`` the second; a fact's owner is ``{b}`` unless said.
FACTS_C: list[tuple[str, list[tuple[str, str]], list[str]]] = [
    ("single-hop", [("{a}: how's the new family member settling in?",
                     "{b}: {petname} is a menace lol, the {pet} chewed through a charger cable already")],
     ["What pet does {b} have?", "What is the name of {b}'s new animal?"]),
    ("single-hop", [("{a}: any news on the interviews?",
                     "{b}: yes!! {company} said yes, I'll be their new {job} from next month")],
     ["Where is {b} going to work?", "Which company hired {b}?"]),
    ("single-hop", [("{a}: is {sibname} still around or gone already?",
                     "{b}: gone since sunday, {city} is home for the next two years")],
     ["Where did {b}'s {sibling} {sibname} move?", "Which city does {sibname} live in now?"]),
    ("single-hop", [("{a}: I heard music from your place yesterday",
                     "{b}: haha that was me practising, {teacher} gave me homework, the {instrument} is harder than it looks")],
     ["What instrument is {b} learning?", "Who teaches {b} music?"]),
    ("single-hop", [("{a}: you skipped the starter at the restaurant, everything ok?",
                     "{b}: turns out I can't have {allergen}, found out the hard way last month")],
     ["What is {b} allergic to?", "What food does {b} have to avoid?"]),
    ("single-hop", [("{a}: was that you in the {color} car this morning?",
                     "{b}: yep, that's the {car}, we got it second hand")],
     ["What car does {b} drive?", "What colour is {b}'s car?"]),
    ("single-hop", [("{a}: what are you reading at the moment?",
                     "{b}: {book}, {author} is a genius honestly")],
     ["What book is {b} reading?", "Which author does {b} admire?"]),
    ("single-hop", [("{a}: did {friend} like what you got her?",
                     "{b}: she loved it, she's already using the {gift} every day")],
     ["What did {b} give {friend}?", "What gift did {b} buy for a friend?"]),
    ("preference", [("{a}: want to grab burgers after work?",
                     "{b}: you know I'm {diet}, but I'll come for the fries")],
     ["What diet does {b} follow?", "Does {b} eat meat?"]),
    ("preference", [("{a}: I'm getting coffee, want anything?",
                     "{b}: the usual please, {coffee}")],
     ["How does {b} take coffee?", "What is {b}'s usual drink order?"]),
    ("preference", [("{a}: how do you stay focused with that open office?",
                     "{b}: headphones and {genre}, nothing else works")],
     ["What music does {b} listen to while working?", "How does {b} concentrate at work?"]),
    ("preference", [("{a}: we're thinking of a beach week in August, join us?",
                     "{b}: ugh crowds, I'd rather go {travelpref}")],
     ["What kind of holiday does {b} like?", "Does {b} enjoy busy beaches?"]),
    ("preference", [("{a}: movie night friday, your pick",
                     "{b}: {movie}, obviously, I never get tired of it")],
     ["What is {b}'s favourite movie?", "Which film does {b} always pick?"]),
    ("temporal", [("{a}: you look tanned!",
                   "{b}: just got back from {place} yesterday, it was unreal")],
     ["When did {b} go to {place}?", "When did {b} come back from a trip abroad?"]),
    ("temporal", [("{a}: how are the legs after today?",
                   "{b}: wrecked, but I finished the {race}! first one ever")],
     ["When did {b} run the {race}?", "When did {b} complete a first race?"]),
    ("temporal", [("{a}: you sound different, are you ok?",
                   "{b}: wisdom teeth came out this morning, I'm chipmunk-faced")],
     ["When did {b} have wisdom teeth removed?", "When did {b} have dental surgery?"]),
    ("temporal", [("{a}: how was last night?",
                   "{b}: {band} were incredible live, I still can't hear properly")],
     ["When did {b} see {band}?", "When did {b} go to a concert?"]),
    ("multi-hop", [("{a}: who was the guy at your party?",
                    "{b}: {friend2}, we met at uni, he's a {job2} now"),
                   ("{a}: coming to {event} on saturday?",
                    "{b}: yes, {friend2} invited me, I can't say no to him")],
     ["What does {friend2}, who invited {b} to {event}, do for a living?",
      "What job does the friend who invited {b} to {event} have?"]),
    ("multi-hop", [("{a}: how's {petname} doing?",
                    "{b}: the {pet} is great, eats like a horse"),
                   ("{a}: why were you at the vet?",
                    "{b}: {petname} has {condition}, poor thing, she's on medication")],
     ["What health problem does {b}'s {pet} have?", "Why did {b} take {petname} to the vet?"]),
    ("knowledge-update", [("{a}: still happy with the flat?",
                           "{b}: love it, {city} suits me, ten minutes from work"),
                          ("{a}: how's the new place?",
                           "{b}: boxes everywhere but {city2} already feels like home")],
     ["Which city does {b} live in now?", "Where is {b} living these days?"]),
    ("knowledge-update", [("{a}: how's work with the new team?",
                           "{b}: {boss} is my manager, she's really supportive"),
                          ("{a}: heard about the reorg, who's your boss now?",
                           "{b}: {boss2}, {boss} went to another department")],
     ["Who is {b}'s manager now?", "Who does {b} report to?"]),
    ("knowledge-update", [("{a}: is that still the old phone?",
                           "{b}: yep, {phone}, it does the job"),
                          ("{a}: ooh new phone?",
                           "{b}: finally switched to {phone2}, battery lasts two days")],
     ["What phone does {b} use now?", "What phone does {b} currently have?"]),
]
#: Everyday chat between the two: ``(a's message, b's reply)``; ``{x}`` is a slot of the pools.
FILLER_C = [
    ("{a}: morning! did you sleep?", "{b}: barely, the neighbours had a party"),
    ("{a}: I'm so tired today", "{b}: same, this week is never ending"),
    ("{a}: what are you up to this weekend?", "{b}: nothing much, maybe clean the flat"),
    ("{a}: did you watch the game last night?", "{b}: only the second half, what a mess"),
    ("{a}: my {sibling} is visiting next week", "{b}: oh nice, say hi from me"),
    ("{a}: work is crazy right now", "{b}: hang in there, friday is close"),
    ("{a}: it's raining again", "{b}: of course it is, I left my umbrella at home"),
    ("{a}: I tried that new ramen place", "{b}: and? worth it?"),
    ("{a}: lol look at this meme", "{b}: hahaha I'm crying"),
    ("{a}: can't refuse a free lunch", "{b}: never, that's the rule"),
    ("{a}: [sigh] my landlord still hasn't fixed the heating", "{b}: that's ridiculous, call him again"),
    ("{a}: ignore my last text, wrong chat", "{b}: haha no worries"),
    ("{a}: how's your mum?", "{b}: much better, thanks for asking"),
    ("{a}: I started going to the gym again", "{b}: good for you! how often?"),
    ("{a}: the train was late again", "{b}: classic, every single morning"),
    ("{a}: I burned the pasta lol", "{b}: how do you even burn pasta"),
    ("{a}: got any plans for the holidays?", "{b}: not yet, you?"),
    ("{a}: I need a new hobby", "{b}: pottery? everyone's doing pottery"),
    ("{a}: you free for a call later?", "{b}: after 7 works"),
    ("{a}: thanks for yesterday, it was fun", "{b}: anytime, let's do it again soon"),
]
#: The facts' topics again, about other people or in passing.
TOPICAL_C = [
    ("{a}: {friend} got a {pet} too, it's adorable", "{b}: everyone has pets now"),
    ("{a}: I might apply to {company}", "{b}: go for it, you'd be great"),
    ("{a}: my cousin moved to {city} last year", "{b}: do you ever visit?"),
    ("{a}: I always wanted to learn the {instrument}", "{b}: it's never too late"),
    ("{a}: {friend} is allergic to {allergen}, poor thing", "{b}: that must make eating out hard"),
    ("{a}: my dad wants a {car}", "{b}: solid choice"),
    ("{a}: book club picked {book}", "{b}: I heard it's good"),
    ("{a}: need a gift idea for my aunt", "{b}: a {gift}?"),
    ("{a}: should I try going {diet}?", "{b}: try it for a month and see"),
    ("{a}: the office coffee is awful", "{b}: bring your own, that's what I do"),
    ("{a}: my neighbour blasts {genre} all day", "{b}: could be worse"),
    ("{a}: {friend} is going to {place} in the spring", "{b}: jealous!"),
    ("{a}: thinking of signing up for a {race}", "{b}: you should, the training is fun"),
    ("{a}: my dentist appointment got moved again", "{b}: annoying"),
    ("{a}: {band} are touring next year", "{b}: tickets will be gone in minutes"),
    ("{a}: my phone screen cracked", "{b}: time for an upgrade"),
    ("{a}: {friend2} wants to become a {job2}", "{b}: bold move"),
    ("{a}: we watched {movie} yesterday", "{b}: did you like it?"),
]
SPEAKERS_C = ["Jonas", "Maren", "Caroline", "Melanie", "Dev", "Aisha", "Tomas", "Nadia", "Leo", "Hana", "Rui", "Greta"]


def _generate_chat(conversations: int, sessions: int, turns_per_session: int, seed: int) -> list[Conversation]:
    """Family ``c``: two friends, names in every turn, facts in the replies (see :data:`FACTS_C`)."""
    rng = random.Random(seed)
    out: list[Conversation] = []
    for c in range(conversations):
        conv = Conversation(name=f"chat-{c + 1}")
        a, b = rng.sample(SPEAKERS_C, 2)
        total = sessions * turns_per_session
        plan: dict[int, tuple[int, int, str, str]] = {}
        fact_slots: list[dict[str, str]] = []
        taken: set[int] = set()
        for f, (_qtype, statements, _) in enumerate(FACTS_C):
            slots = _slots(rng) | {"a": a, "b": b}
            fact_slots.append(slots)
            while True:
                positions = sorted(rng.sample(range(total), len(statements)))
                if taken.isdisjoint(positions) and (len(positions) == 1 or
                                                    positions[1] // turns_per_session > positions[0] // turns_per_session):
                    break
            for part, pos in enumerate(positions):
                taken.add(pos)
                first, reply = statements[part]
                plan[pos] = (f, part, _fill(first, slots), _fill(reply, slots))
        start = datetime(2025, 3, 3, 19, 0, tzinfo=UTC) + timedelta(days=rng.randrange(0, 60))
        evidence: dict[tuple[int, int], int] = {}
        for pos, session, ts in _schedule(rng, start, total, turns_per_session, gap_days=(2, 20), minutes=2):
            if pos in plan:
                f, part, first, reply = plan[pos]
                evidence[(f, part)] = pos
            else:
                slots = _slots(rng) | {"a": a, "b": b}
                first, reply = (_fill(x, slots) for x in rng.choice(TOPICAL_C if rng.random() < 0.35 else FILLER_C))
            conv.turns.append(Turn(pos, session, ts, first, reply))
        for f, (qtype, statements, questions) in enumerate(FACTS_C):
            style = "paraphrase" if rng.random() < PARAPHRASE_SHARE else "keyword"
            text = _fill(questions[0 if style == "keyword" else 1], fact_slots[f])
            ev = [evidence[(f, 1)]] if qtype == "knowledge-update" else [evidence[(f, p)] for p in range(len(statements))]
            conv.questions.append(Question(text, qtype, ev, style))
        out.append(conv)
    return out


# -- family "d": life events that run through the conversation (held out, written blind) ---------------------------
# Written before any result on it was seen and never changed afterwards (not even to move a figure). Designed from
# the published description of LoCoMo (Maharana et al., 2024: two speakers, about 300 turns and 9K tokens, so
# about 30 tokens a message, over up to 35 sessions; each speaker's conversation follows a persona and a graph of
# up to 25 life events spread over months). What families a-c lack and this one has: a speaker's OWN life events
# come back session after session ("the puppy chewed my shoes again", "violin practice went badly"), so every
# question's topic has many turns by the same person about the same thing, and only the one holding the detail
# asked about is evidence. Messages are one to three sentences; names are in every turn (as in c).
#: ``(type, [evidence statements: (a's message, b's reply)], question, [follow-ups on the same event, no detail])``
EVENTS_D: list[tuple[str, list[tuple[str, str]], str, list[tuple[str, str]]]] = [
    ("single-hop", [("{a}: any news on the pet front?",
                     "{b}: we adopted a {pet} on Saturday and called her {petname}. She hid under the bed all day.")],
     "What did {b} name the {pet}?",
     [("{a}: how's the {pet} settling in?", "{b}: she finally eats from my hand, such a relief honestly."),
      ("{a}: you look exhausted", "{b}: the {pet} woke me up at five again, she wants breakfast early."),
      ("{a}: is the {pet} still scared of the vacuum?", "{b}: less now, she just watches it from the sofa.")]),
    ("single-hop", [("{a}: how did the interviews go?",
                     "{b}: I got the offer! I start as a {job} at {company} in two weeks.")],
     "Which company hired {b}?",
     [("{a}: first week at the new job?", "{b}: so many meetings, but the team seems kind."),
      ("{a}: still happy with the new job?", "{b}: mostly, the commute is long but the work is interesting."),
      ("{a}: you're working late again", "{b}: deadline at work, the new job is intense this month.")]),
    ("single-hop", [("{a}: how are the lessons going?",
                     "{b}: good! {teacher} says my bowing on the {instrument} is getting cleaner.")],
     "Who teaches {b} the {instrument}?",
     [("{a}: did you practise today?", "{b}: an hour of scales on the {instrument}, my fingers are sore."),
      ("{a}: when is your recital?", "{b}: not for months, I'm nowhere near ready to play in public."),
      ("{a}: can you play something for me?", "{b}: maybe next time, I only know two pieces on the {instrument} so far.")]),
    ("single-hop", [("{a}: what did the allergist say?",
                     "{b}: it's {allergen}. The test lit up immediately, so no more of that for me.")],
     "What is {b} allergic to?",
     [("{a}: how's the diet with the allergy?", "{b}: annoying, I read every label at the supermarket now."),
      ("{a}: want to try the new thai place?", "{b}: only if they can tell me what's in the sauces, allergy stuff."),
      ("{a}: did you have a reaction again?", "{b}: a mild one at the wedding, the food wasn't labelled.")]),
    ("single-hop", [("{a}: what did you end up getting for {friend}?",
                     "{b}: a {gift}, she has wanted one for ages.")],
     "What did {b} give {friend} as a present?",
     [("{a}: is {friend}'s party still on?", "{b}: yes, saturday at her place, I still need to wrap the present."),
      ("{a}: did {friend} like the present?", "{b}: she loved it, she sent me a photo using it."),
      ("{a}: how was {friend}'s birthday?", "{b}: lovely, we stayed up way too late talking.")]),
    ("single-hop", [("{a}: how's the training going?",
                     "{b}: I'm up to {km} km a week now for the {race}, legs are holding up.")],
     "How many km a week is {b} running?",
     [("{a}: did you run today?", "{b}: just an easy loop, the {race} plan says rest after long days."),
      ("{a}: new running shoes?", "{b}: yes, my old ones were falling apart with all the training."),
      ("{a}: you look fit", "{b}: thanks, all this running for the {race} is paying off.")]),
    ("preference", [("{a}: what do you listen to while you work?",
                     "{b}: {genre}, anything with words distracts me.")],
     "What music does {b} work to?",
     [("{a}: how do you get through those long reports?", "{b}: headphones on, same playlist every day."),
      ("{a}: did you find a new playlist?", "{b}: no, I keep going back to my old work one."),
      ("{a}: the open office sounds loud", "{b}: it is, I can't write anything without music.")]),
    ("preference", [("{a}: where do you want to go this summer?",
                     "{b}: somewhere quiet, I'd rather go {travelpref} than lie on a crowded beach.")],
     "What kind of holiday does {b} prefer?",
     [("{a}: did you book the summer trip?", "{b}: not yet, still comparing places."),
      ("{a}: any holiday plans?", "{b}: thinking about it, I really need a break from everything."),
      ("{a}: that trip looks fun", "{b}: it does, maybe next year when work calms down.")]),
    ("temporal", [("{a}: how was the trip?",
                   "{b}: we landed from {place} last night, it was unreal, I want to go back already.")],
     "When did {b} come back from {place}?",
     [("{a}: did you sort the photos from the trip?", "{b}: half of them, there are hundreds."),
      ("{a}: still jet-lagged?", "{b}: a bit, I woke up at 3am wide awake."),
      ("{a}: what was the best part of the trip?", "{b}: the food, hands down, I miss it every day.")]),
    ("temporal", [("{a}: how did it go today?",
                   "{b}: I finished my first {race}! Slow, but I crossed the line.")],
     "When did {b} run the {race}?",
     [("{a}: are your legs recovered?", "{b}: finally, stairs were a nightmare for three days."),
      ("{a}: signing up for another race?", "{b}: maybe in autumn, I need a break first."),
      ("{a}: did you get a medal?", "{b}: yes, it's hanging on my bookshelf now.")]),
    ("temporal", [("{a}: how was the concert?",
                   "{b}: {band} played for almost three hours tonight, best gig of my life.")],
     "When did {b} see {band} live?",
     [("{a}: still humming the songs?", "{b}: all week, I've had the setlist on repeat."),
      ("{a}: did you buy merch?", "{b}: a t-shirt, way too expensive but worth it."),
      ("{a}: would you go again?", "{b}: in a heartbeat, I'm watching the tour dates.")]),
    ("multi-hop", [("{a}: who's the friend you keep mentioning?",
                    "{b}: {friend2}, from uni. He works as a {job2} now."),
                   ("{a}: plans for saturday?",
                    "{b}: {friend2} invited me to {event}, should be fun.")],
     "What does the friend who invited {b} to {event} do for work?",
     [("{a}: are you still in touch with your uni friends?", "{b}: with one or two, we have dinner sometimes."),
      ("{a}: how was saturday?", "{b}: fun, I stayed out way too late."),
      ("{a}: who was at the party?", "{b}: mostly people I didn't know, but they were nice.")]),
    ("multi-hop", [("{a}: how's your {sibling}?",
                    "{b}: {sibname} moved to {city} in the spring, loves it there."),
                   ("{a}: any travel plans?",
                    "{b}: I'm flying out to visit {sibname} in {month}, already booked.")],
     "Which city is {b} flying to in {month}?",
     [("{a}: do you miss your {sibling}?", "{b}: a lot, we used to see each other every week."),
      ("{a}: did you call your family this weekend?", "{b}: yes, a long video call, everyone's fine."),
      ("{a}: packing yet?", "{b}: not at all, I always pack the night before.")]),
    ("knowledge-update", [("{a}: how's the flat?", "{b}: fine, {city} is nice but the rent keeps going up."),
                          ("{a}: how's the move going?",
                           "{b}: we're in {city2} now, boxes everywhere but it already feels like home.")],
     "Where does {b} live now?",
     [("{a}: found a flat yet?", "{b}: still looking, everything is either tiny or far away."),
      ("{a}: did you sign the lease?", "{b}: yes, finally, moving day is in two weeks."),
      ("{a}: do you like the new neighbourhood?", "{b}: so far, there's a great bakery around the corner.")]),
    ("knowledge-update", [("{a}: how's work?", "{b}: good, {boss} is my manager and she's very supportive."),
                          ("{a}: any news from work?",
                           "{b}: big reorg, {boss2} is my manager now and {boss} moved to another team.")],
     "Who is {b}'s manager now?",
     [("{a}: how was the performance review?", "{b}: fine, my manager was fair about it."),
      ("{a}: still getting along with your boss?", "{b}: mostly, we disagree about deadlines sometimes."),
      ("{a}: is the reorg settling down?", "{b}: slowly, everyone is still confused about who does what.")]),
    ("knowledge-update", [("{a}: still on the old phone?", "{b}: yes, {phone}, it does the job."),
                          ("{a}: new phone?", "{b}: I switched to {phone2}, the battery lasts two days.")],
     "What phone does {b} use now?",
     [("{a}: why didn't you answer?", "{b}: my phone died again, the battery is hopeless."),
      ("{a}: did you back up your photos?", "{b}: yes, before I reset the phone."),
      ("{a}: is the new phone any good?", "{b}: I like it, the camera is much better.")]),
]


def _generate_events(conversations: int, sessions: int, turns_per_session: int, seed: int) -> list[Conversation]:
    """Family ``d``: two friends; each of ``b``'s life events (:data:`EVENTS_D`) is told once with its detail
    and comes back in later sessions without it; the rest is everyday chat (family c's filler)."""
    rng = random.Random(seed)
    out: list[Conversation] = []
    total = sessions * turns_per_session
    for c in range(conversations):
        conv = Conversation(name=f"events-{c + 1}")
        a, b = rng.sample(SPEAKERS_C, 2)
        plan: dict[int, tuple[int, int, str, str]] = {}  # position -> (event, part; -1 for a follow-up)
        event_slots: list[dict[str, str]] = []
        taken: set[int] = set()
        for e, (_qtype, statements, _question, follow) in enumerate(EVENTS_D):
            slots = _slots(rng) | {"a": a, "b": b}
            event_slots.append(slots)
            while True:  # the statements in different sessions, in order; the follow-ups after the first
                positions = sorted(rng.sample(range(total), len(statements)))
                if taken.isdisjoint(positions) and (len(positions) == 1 or
                                                    positions[1] // turns_per_session > positions[0] // turns_per_session):
                    break
            for part, pos in enumerate(positions):
                taken.add(pos)
                first, reply = statements[part]
                plan[pos] = (e, part, _fill(first, slots), _fill(reply, slots))
            later = [p for p in range(positions[0] + 1, total) if p not in taken]
            for first, reply in follow:
                if not later:
                    break
                pos = rng.choice(later)
                later.remove(pos)
                taken.add(pos)
                plan[pos] = (e, -1, _fill(first, slots), _fill(reply, slots))
        start = datetime(2025, 2, 10, 20, 0, tzinfo=UTC) + timedelta(days=rng.randrange(0, 60))
        evidence: dict[tuple[int, int], int] = {}
        for pos, session, ts in _schedule(rng, start, total, turns_per_session, gap_days=(3, 14), minutes=2):
            if pos in plan:
                e, part, first, reply = plan[pos]
                if part >= 0:
                    evidence[(e, part)] = pos
            else:
                slots = _slots(rng) | {"a": a, "b": b}
                first, reply = (_fill(x, slots) for x in rng.choice(TOPICAL_C if rng.random() < 0.35 else FILLER_C))
            conv.turns.append(Turn(pos, session, ts, first, reply))
        for e, (qtype, statements, question, _) in enumerate(EVENTS_D):
            ev = [evidence[(e, 1)]] if qtype == "knowledge-update" else [evidence[(e, p)] for p in range(len(statements))]
            conv.questions.append(Question(_fill(question, event_slots[e]), qtype, ev, "keyword"))
        out.append(conv)
    return out

#: The template families: ``a`` (the reported dataset, seen while choosing parameters on seed 7), ``b``
#: (held out: never used to choose anything), ``c`` (casual chat: used to fix things, no longer held out) and ``d``
#: (held out, written blind before any result on it: life events that come back session after session).
FAMILIES = {
    "a": (lambda: (FACTS, FILLER_USER, TOPICAL, ASIDES, FILLER_ASSISTANT)),
    "b": (lambda: (FACTS_B, FILLER_USER_B, TOPICAL_B, ASIDES_B, FILLER_ASSISTANT_B)),
    "c": None,  # casual two-person chat: its own generator (_generate_chat)
    "d": None,  # life events that come back session after session: its own generator (_generate_events)
}


#: Share of questions that paraphrase their evidence instead of reusing one of its words. Long-conversation
#: benchmarks built from human-written questions (LoCoMo, LongMemEval) mostly name the person, place or thing
#: asked about; about a third of questions here do not.
PARAPHRASE_SHARE = 1 / 3


def _schedule(rng: random.Random, start: datetime, total: int, turns_per_session: int, *,
              gap_days: tuple[int, int], minutes: int) -> Iterator[tuple[int, int, float]]:
    """``(position, session, timestamp)`` of every turn: sessions ``gap_days`` apart (drawn from ``rng`` as the
    loop reaches each new session), turns ``minutes`` apart within one."""
    day = start
    for pos in range(total):
        if pos % turns_per_session == 0 and pos:
            day = day + timedelta(days=rng.randrange(*gap_days))
        yield pos, pos // turns_per_session, (day + timedelta(minutes=minutes * (pos % turns_per_session))).timestamp()


def _fill(template: str, slots: dict[str, str]) -> str:
    return template.format(**slots)


def _slots(rng: random.Random) -> dict[str, str]:
    slots = {key: rng.choice(values) for key, values in POOLS.items()}
    slots["ack"] = rng.choice(ACKS)
    for key in ("city", "km", "boss", "phone"):
        others = [v for v in POOLS[key] if v != slots[key]]
        slots[key + "2"] = rng.choice(others)
    return slots


def generate(conversations: int = 8, sessions: int = 16, turns_per_session: int = 12, seed: int = 1234,
             family: str = "a") -> list[Conversation]:
    """The dataset: ``conversations`` independent users, each with dated sessions of chatter and facts, from the
    templates of ``family`` (see :data:`FAMILIES`)."""
    if family not in FAMILIES:
        raise ValueError(f"unknown template family {family!r}: choose one of {sorted(FAMILIES)}")
    if family == "c":
        return _generate_chat(conversations, sessions, turns_per_session, seed)
    if family == "d":
        return _generate_events(conversations, sessions, turns_per_session, seed)
    facts, filler_user, topical, asides, filler_assistant = FAMILIES[family]()
    rng = random.Random(seed)
    out: list[Conversation] = []
    for c in range(conversations):
        conv = Conversation(name=f"conv-{c + 1}")
        total = sessions * turns_per_session
        # Facts take slots; a two-turn fact puts its parts in different sessions, the second later.
        plan: dict[int, tuple[int, int, str, str]] = {}  # position -> (fact index, part, user, assistant)
        fact_slots: list[dict[str, str]] = []
        free = list(range(total))
        rng.shuffle(free)
        taken: set[int] = set()
        for f, (qtype, statements, _) in enumerate(facts):
            slots = _slots(rng)
            fact_slots.append(slots)
            if len(statements) == 1:
                pos = next(p for p in free if p not in taken)
                positions = [pos]
            else:
                while True:
                    a, b = sorted(rng.sample(range(total), 2))
                    if a not in taken and b not in taken and b // turns_per_session > a // turns_per_session:
                        break
                positions = [a, b]
            for part, pos in enumerate(positions):
                taken.add(pos)
                user, assistant = statements[part]
                plan[pos] = (f, part, _fill(user, slots), _fill(assistant, slots))
        start = datetime(2025, 1, 6, 18, 0, tzinfo=UTC) + timedelta(days=rng.randrange(0, 60))
        evidence: dict[tuple[int, int], int] = {}
        for pos, session, ts in _schedule(rng, start, total, turns_per_session, gap_days=(3, 16), minutes=3):
            if pos in plan:
                f, part, user, assistant = plan[pos]
                evidence[(f, part)] = pos
                # People rarely state a fact alone: most of the time it comes with asides before or after.
                roll = rng.random()
                if roll < 0.3:
                    user = f"{rng.choice(asides)} {user}"
                elif roll < 0.6:
                    user = f"{user} {rng.choice(asides)}"
                elif roll < 0.8:
                    before, after = rng.sample(asides, 2)
                    user = f"{before} {user} {after}"
                assistant = f"{assistant} {rng.choice(filler_assistant)}"
            else:
                slots = _slots(rng)
                pool = topical if rng.random() < 0.4 else filler_user
                user = _fill(rng.choice(pool), slots)
                assistant = " ".join(rng.sample(filler_assistant, 2))
            conv.turns.append(Turn(pos, session, ts, user, assistant))
        for f, (qtype, statements, questions) in enumerate(facts):
            style = "paraphrase" if rng.random() < PARAPHRASE_SHARE else "keyword"
            text = _fill(questions[0 if style == "keyword" else 1], fact_slots[f])
            if qtype == "knowledge-update":
                ev = [evidence[(f, 1)]]
            else:
                ev = [evidence[(f, part)] for part in range(len(statements))]
            conv.questions.append(Question(text, qtype, ev, style))
        out.append(conv)
    return out


if __name__ == "__main__":
    data = generate()
    turns = sum(len(c.turns) for c in data)
    questions = [q for c in data for q in c.questions]
    print(f"{len(data)} conversations, {turns} turns, {len(questions)} questions")
    from collections import Counter

    print(Counter(q.qtype for q in questions), Counter(q.style for q in questions))
    for q in data[0].questions[:6]:
        print(q.qtype, q.style, q.text, "->", [data[0].turns[i].user for i in q.evidence])
