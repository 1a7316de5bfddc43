//! A second phrasebook, written apart from the first and never tuned on: other topics, longer
//! and chattier messages (a fact often sits in a clause of a message about something else,
//! some in lower case), and questions asked the way people ask an assistant ("do you
//! remember…", "remind me…"). As in the first, a question shares almost no content word with
//! the messages that answer it.

use super::{Aspect, Bank, Event, Pair};

/// The second phrasebook, as [`generate`](crate::recall_eval::generate) takes it.
pub const SECOND: Bank = Bank {
    name: "second",
    aspects: ASPECTS,
    pairs: PAIRS,
    events: EVENTS,
    order_questions: ORDER_QUESTIONS,
    unanswerable: UNANSWERABLE,
    small_talk: SMALL_TALK,
    acks: ACKS,
};

const ASPECTS: &[Aspect] = &[
    Aspect {
        statements: &[
            "First week at {} went well, the onboarding people were lovely.",
            "been commuting to the {} offices downtown since march, the canteen is decent",
            "Long day. {} has me fixing spreadsheets nobody else understands.",
        ],
        updates: &[
            "Accepted the offer! From Monday my badge says {}.",
            "so I quit, and {} took me on starting this month",
        ],
        questions: &[
            "Who is my employer?",
            "Do you remember who I am working for?",
        ],
        values: &[
            "Brightwave",
            "Northwind",
            "Kestrel Labs",
            "Orbis",
            "Tandem Foods",
        ],
    },
    Aspect {
        statements: &[
            "Date night with {} tonight, we finally tried the Ethiopian place.",
            "{} and I have been together three years this spring, can you believe it.",
        ],
        updates: &[
            "We split up in the end. I've been seeing someone called {} for a few weeks.",
            "introduced {} to my parents at last, they got on really well, it's serious now",
        ],
        questions: &[
            "Who am I romantically involved with?",
            "Remind me what my partner is called.",
        ],
        values: &["Lena", "Marco", "Sana", "Jonas", "Priya", "Tomas"],
    },
    Aspect {
        statements: &[
            "Doing the {} thing for a month now, my grocery bill looks completely different.",
            "been eating {} since new year and honestly I feel lighter",
        ],
        updates: &[
            "Dropped that plan. Strictly {} from here on.",
            "My nutritionist moved me over to {}, so the fridge got a makeover.",
        ],
        questions: &[
            "What kind of diet am I following?",
            "Do you remember what I'm allowed to eat at the moment?",
        ],
        values: &["vegan", "keto", "pescatarian", "paleo", "gluten-free"],
    },
    Aspect {
        statements: &[
            "My app streak for {} is at forty days!",
            "Started evening classes in {} at the library, the teacher is strict but funny.",
        ],
        updates: &[
            "Paused those lessons, I'm doing {} with a tutor now.",
            "switched to {}, it sounds nicer and my colleague can practise with me",
        ],
        questions: &[
            "Which foreign tongue am I picking up?",
            "What language am I studying?",
        ],
        values: &[
            "Portuguese",
            "Korean",
            "Swahili",
            "Polish",
            "Turkish",
            "Greek",
        ],
    },
    Aspect {
        statements: &[
            "My new {} arrived, I spent the whole evening setting it up.",
            "typing this on the {} I got for work, the keyboard is lovely",
        ],
        updates: &[
            "Returned it within the thirty days and got a {} instead.",
            "The old one died for good, so now it's a {} on my desk.",
        ],
        questions: &[
            "What computer do I use?",
            "Which machine do I do my work on?",
        ],
        values: &["ThinkPad", "MacBook", "Chromebook", "Surface", "Framework"],
    },
    Aspect {
        statements: &[
            "Dr. {} finally took my back pain seriously, we have a plan.",
            "Got registered at the practice round the corner, my GP is Dr. {}.",
        ],
        updates: &[
            "Changed practices after the move, Dr. {} looks after me now.",
            "my old doctor retired, they handed me over to Dr. {}",
        ],
        questions: &[
            "Who is my physician?",
            "Which medic do I see when I'm unwell?",
        ],
        values: &["Okafor", "Lindqvist", "Herrera", "Nakamura", "Dubois"],
    },
    Aspect {
        statements: &[
            "The {} ride in the morning is my thinking time.",
            "Getting in by {} takes twenty minutes if the weather is kind.",
        ],
        updates: &[
            "Now that the route changed I take the {} instead.",
            "gave up on that, it's the {} every morning from now on",
        ],
        questions: &["How do I commute?", "How do I get to my job each day?"],
        values: &["bike", "scooter", "tram", "ferry", "bus"],
    },
    Aspect {
        statements: &[
            "Can't put down anything by {}, I'm on my fourth novel of hers.",
            "Reread my battered copy of {} on the plane, still perfect.",
        ],
        updates: &[
            "Honestly {} has replaced her as the one I obsess over.",
            "Book club converted me, {} is my go-to now.",
        ],
        questions: &[
            "Who is my favourite author?",
            "Which writer do I recommend to everyone?",
        ],
        values: &["Ferrante", "Atwood", "Ishiguro", "Morrison", "Murakami"],
    },
    Aspect {
        statements: &[
            "Saw {} live last night, my ears are still ringing.",
            "had {} on repeat the whole drive to the coast",
        ],
        updates: &[
            "I'm so over them. {} is all I play these days.",
            "My new obsession is {}, the old records are gathering dust.",
        ],
        questions: &[
            "What band am I into?",
            "Which musicians do I listen to most?",
        ],
        values: &[
            "Radiohead",
            "Khruangbin",
            "Portishead",
            "Fleetwood Mac",
            "Arcade Fire",
        ],
    },
    Aspect {
        statements: &[
            "Opened an account with {}, their app is slick.",
            "My salary lands at {} and the card is bright orange.",
        ],
        updates: &[
            "Moved everything over to {} for the better interest rate.",
            "closed the old account, it's all with {} now",
        ],
        questions: &["Who do I bank with?", "Where do I keep my money?"],
        values: &["Monzo", "ING", "Revolut", "Triodos", "Barclays"],
    },
    Aspect {
        statements: &[
            "The {} on the allotment are finally ripening, such a good feeling.",
            "Planted a whole row of {} this weekend, my back is killing me.",
        ],
        updates: &[
            "Ripped those out, the raised beds are full of {} now.",
            "This year I'm only doing {}, less work and the slugs ignore them.",
        ],
        questions: &[
            "What am I growing?",
            "What vegetables are in my garden plot?",
        ],
        values: &["tomatoes", "courgettes", "beans", "pumpkins", "peppers"],
    },
    Aspect {
        statements: &[
            "Screamed at the TV all evening, {} lost again.",
            "Got season tickets for {}, twenty home games of misery.",
        ],
        updates: &[
            "I've switched allegiance, I'm cheering for {} this season.",
            "gave my scarf away, {} are my lot now",
        ],
        questions: &["Which club do I support?", "What team am I a fan of?"],
        values: &["Arsenal", "Celtic", "Ajax", "Benfica", "Napoli"],
    },
];

const PAIRS: &[Pair] = &[
    Pair {
        first: "Booked a course of driving lessons for my daughter's birthday.",
        second: "Paying for my nephew's school trip to Rome, he's over the moon.",
        question: "What am I spending money on for the youngsters in my life?",
    },
    Pair {
        first: "Our boiler broke again and the engineer comes on Friday.",
        second: "The ceiling above the bathroom leaks whenever it pours.",
        question: "What repairs does my house need?",
    },
    Pair {
        first: "learning to knit a scarf from a video tutorial, it's very lumpy so far",
        second: "Trying my hand at sourdough, the starter is called Gerald.",
        question: "Which new crafts am I practising?",
    },
    Pair {
        first: "My best friend Dana is expecting twins!",
        second: "My cousin got into medical school, first in the family.",
        question: "What good news did the people close to me share?",
    },
    Pair {
        first: "I keep waking at 3am and can't fall back asleep.",
        second: "headaches every afternoon since I started wearing the new glasses",
        question: "What health complaints have I mentioned?",
    },
    Pair {
        first: "We're hosting Christmas this year, twelve people around one table.",
        second: "Planning a surprise anniversary dinner for my parents, keep it secret.",
        question: "Which gatherings am I organising?",
    },
    Pair {
        first: "Finished the first season of that Danish crime show last night.",
        second: "Started a documentary series about deep-sea creatures, so weird and great.",
        question: "What have I been watching on television?",
    },
    Pair {
        first: "Applied for a mortgage extension last week, fingers crossed.",
        second: "Filed my tax return two days before the deadline, as usual.",
        question: "What official forms have I dealt with?",
    },
    Pair {
        first: "Signed up for a 10k charity run in the autumn.",
        second: "Entered a photography contest with my shot of the harbour at dusk.",
        question: "Which competitions have I registered for?",
    },
    Pair {
        first: "My laptop fan sounds like a jet engine when I open more than two tabs.",
        second: "The car's check-engine light came on again this morning.",
        question: "Which gadgets or machines are giving me trouble?",
    },
];

const EVENTS: &[Event] = &[
    Event {
        told: "Got the keys to the allotment this morning, it's a jungle.",
        named: "taking over the garden plot",
    },
    Event {
        told: "Slipped on ice outside the bakery and broke my wrist.",
        named: "the fracture",
    },
    Event {
        told: "Our wedding was perfect, even the rain held off.",
        named: "getting married",
    },
    Event {
        told: "graduated today!! mum cried through the whole ceremony",
        named: "my degree award day",
    },
    Event {
        told: "Ran out of petrol on the motorway and waited three hours for recovery.",
        named: "the roadside breakdown",
    },
    Event {
        told: "Went to my first ever opera, Tosca, absolutely stunning.",
        named: "the evening of classical singing",
    },
    Event {
        told: "Lost my wallet on the tram, cards and all.",
        named: "misplacing my purse",
    },
    Event {
        told: "Grandad passed away peacefully last night.",
        named: "losing my grandfather",
    },
    Event {
        told: "Our startup's first paying customer signed today!",
        named: "landing our first client",
    },
    Event {
        told: "Moved into the new flat, still sleeping on a mattress on the floor.",
        named: "the house move",
    },
];

/// How a user asks about the order of two events, or the time between them.
const ORDER_QUESTIONS: &[&str] = &[
    "Was {a} earlier or later than {b}?",
    "How long after {a} was {b}?",
    "What happened first: {a} or {b}?",
    "Remind me whether {a} came before {b}.",
];

/// Questions about things these users never mention: recall should find nothing.
const UNANSWERABLE: &[&str] = &[
    "What is my favourite colour?",
    "Where did I go to primary school?",
    "How tall am I?",
    "What is my mother's maiden name?",
    "Which airline do I usually fly with?",
    "Do I have any tattoos?",
    "What is my star sign?",
    "What's my passport number?",
    "Which hospital was I born in?",
    "What car did my father drive?",
    "What did I name my first goldfish?",
    "Which streaming service do I pay for?",
];

/// Everyday chatter between the facts.
const SMALL_TALK: &[&str] = &[
    "Ugh, Mondays.",
    "Is it normal for bananas to go brown this fast?",
    "The printer at work jammed three times today.",
    "What's a good name for a pub quiz team?",
    "heard a great joke about penguins earlier, forgot the punchline",
    "The dog next door barked all night.",
    "Can you convert 30 degrees Celsius to Fahrenheit?",
    "I should really drink more water.",
    "The supermarket was out of oat milk again.",
    "Spilled coffee on my shirt right before the meeting.",
    "Wondering whether to get a haircut.",
    "The sunset tonight was ridiculous, all pink and orange.",
    "How long do I boil an egg for?",
    "our wifi keeps dropping out",
    "There was a fox in the street this evening.",
    "What's the capital of Australia again?",
];

/// Replies of the assistant, stored as episodes too.
const ACKS: &[&str] = &[
    "Okay, I've made a note of that.",
    "Understood!",
    "Thanks, good to know.",
    "I'm sorry to hear that.",
    "Happy to help with anything else.",
    "Interesting, tell me more whenever you like.",
];
