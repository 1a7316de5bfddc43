//! The phrasebook the recall knobs were tuned on (`CAIRN_EVAL_SEED=1`): twelve aspects, eight
//! pairs, ten events. Statements and questions are written so that a question shares almost
//! no content word with the message that answers it: the user says "we adopted a beagle puppy
//! and named him Biscuit", and later asks "what is my pet called?". Several phrasings of
//! each keep a ranker from learning one sentence shape.

use super::{Aspect, Bank, Event, Pair};

/// The first phrasebook, as [`generate`](crate::recall_eval::generate) takes it.
pub const FIRST: Bank = Bank {
    name: "first",
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
            "We finally adopted a beagle puppy and named him {}.",
            "The rescue shelter let us take home a scruffy terrier, we call him {}.",
        ],
        updates: &[
            "The kids insisted, so the puppy answers to {} now instead.",
            "We renamed our little guy, from today he is {}.",
        ],
        questions: &["What is my pet called?", "Remind me of our animal's name."],
        values: &["Biscuit", "Pepper", "Nemo", "Juniper", "Waffles", "Ziggy"],
    },
    Aspect {
        statements: &[
            "Just signed the lease on a flat in {}, close to the harbour.",
            "After years of renting elsewhere we bought a tiny house in {}.",
        ],
        updates: &[
            "The relocation is done: we unpacked the last boxes in {} yesterday.",
            "New chapter, the removal van dropped everything at our place in {}.",
        ],
        questions: &[
            "Which town is home for me?",
            "Where do I reside at the moment?",
        ],
        values: &["Lisbon", "Oslo", "Nairobi", "Osaka", "Tallinn", "Quito"],
    },
    Aspect {
        statements: &[
            "My shift at the hospital starts at six, being a {} is exhausting.",
            "I got hired as a {} at the clinic on Elm Street.",
        ],
        updates: &[
            "I handed in my notice and retrained, I am a {} these days.",
            "Career change accomplished: today was my first day as a {}.",
        ],
        questions: &["What do I do for a living?", "What is my occupation?"],
        values: &["nurse", "radiologist", "pharmacist", "paramedic", "midwife"],
    },
    Aspect {
        statements: &[
            "Picked up my new {} from the dealer, it smells brand new.",
            "The garage finally fixed the brakes on my {}.",
        ],
        updates: &[
            "Sold the old one and bought a {} last weekend.",
            "Traded in my previous ride for a {}.",
        ],
        questions: &["What vehicle do I drive?", "Which automobile do I own?"],
        values: &["Volvo", "Toyota", "Tesla", "Fiat", "Subaru", "Skoda"],
    },
    Aspect {
        statements: &[
            "Breaking out in hives again, I really cannot touch {}.",
            "The doctor confirmed it: {} make my throat swell.",
        ],
        updates: &[
            "New test results: the reaction was really to {}, not the other thing.",
            "Turns out the culprit is {}, the allergist says.",
        ],
        questions: &[
            "Which foods should I avoid?",
            "What am I sensitive to medically?",
        ],
        values: &["peanuts", "shellfish", "strawberries", "sesame", "kiwis"],
    },
    Aspect {
        statements: &[
            "Lessons on the {} every Tuesday, my fingers hurt.",
            "I have been practising scales on my {} before breakfast.",
        ],
        updates: &[
            "I gave up on the old one and switched to the {}.",
            "My teacher moved me onto the {} this term.",
        ],
        questions: &[
            "What instrument am I learning?",
            "Which music lessons do I take?",
        ],
        values: &["cello", "trumpet", "banjo", "accordion", "clarinet", "harp"],
    },
    Aspect {
        statements: &[
            "My sister {} is getting married in June.",
            "Spent the afternoon with my sibling {}, she baked a cake.",
        ],
        updates: &[
            "My sister goes by {} now, she changed it legally.",
            "Small family news, my sibling asked everyone to call her {} from now on.",
        ],
        questions: &["What is my sister's name?", "How is my sibling called?"],
        values: &["Alma", "Greta", "Ines", "Noor", "Petra", "Yuki"],
    },
    Aspect {
        statements: &[
            "Every morning I brew a pot of {} before anything else.",
            "Nothing beats a cup of {} when it rains.",
        ],
        updates: &[
            "I quit the old habit, it is {} in my mug every morning now.",
            "My new morning ritual is {}.",
        ],
        questions: &["What do I like to drink?", "Which beverage is my usual?"],
        values: &["green tea", "espresso", "rooibos", "matcha", "chai"],
    },
    Aspect {
        statements: &[
            "Training for my first {} has taken over my weekends.",
            "Joined a club for {} at the community centre.",
        ],
        updates: &[
            "I dropped the old sport, it is all {} for me now.",
            "These days my free time goes into {}.",
        ],
        questions: &["Which sport do I practise?", "How do I stay fit?"],
        values: &["marathon", "rowing", "fencing", "climbing", "judo"],
    },
    Aspect {
        statements: &[
            "Our son {} lost his first tooth today.",
            "Picked up {} from kindergarten, he drew a dragon.",
        ],
        updates: &[
            "Our boy wants to be called {} now, his middle name.",
            "He insists on {} since his birthday, so that is his name now.",
        ],
        questions: &["What is my child's name?", "How is my kid called?"],
        values: &["Theo", "Milan", "Oskar", "Rafael", "Idris"],
    },
    Aspect {
        statements: &[
            "I am writing my thesis on {} and the deadline is close.",
            "My dissertation about {} got approved by the committee.",
        ],
        updates: &[
            "My advisor made me switch my thesis to {}.",
            "The research changed direction, it is about {} now.",
        ],
        questions: &["What topic am I studying?", "What is my research about?"],
        values: &[
            "coral reefs",
            "medieval trade",
            "quantum dots",
            "urban bees",
        ],
    },
    Aspect {
        statements: &[
            "Booked flights for our holiday in {} in August.",
            "We are counting the days until the trip to {}.",
        ],
        updates: &[
            "Change of plans, the vacation is going to {} instead.",
            "We cancelled the first booking and chose {} for the summer.",
        ],
        questions: &[
            "Where am I travelling this summer?",
            "What is my vacation destination?",
        ],
        values: &["Iceland", "Peru", "Vietnam", "Morocco", "Japan"],
    },
];

const PAIRS: &[Pair] = &[
    Pair {
        first: "Started going to a pottery class on Thursday evenings.",
        second: "Bought a second-hand telescope to watch Saturn from the balcony.",
        question: "Which hobbies have I taken up recently?",
    },
    Pair {
        first: "My grandmother turns ninety in October, we are planning a party.",
        second: "My uncle just retired from the fire brigade after forty years.",
        question: "What milestones are my relatives celebrating?",
    },
    Pair {
        first: "The dentist said I need a crown on my molar.",
        second: "Physiotherapy for my knee is twice a week until spring.",
        question: "What medical appointments do I have going on?",
    },
    Pair {
        first: "I am saving up for a sailing boat.",
        second: "Putting money aside each month for a loft conversion.",
        question: "What big purchases am I budgeting for?",
    },
    Pair {
        first: "I promised my neighbour I would feed her cats in May.",
        second: "Agreed to help my friend move his piano next weekend.",
        question: "What favours did I commit to?",
    },
    Pair {
        first: "Reading a biography of Marie Curie on the train.",
        second: "Halfway through a thriller set in Reykjavik.",
        question: "Which books am I in the middle of?",
    },
    Pair {
        first: "Our team at work is migrating the billing system to a new vendor.",
        second: "My manager asked me to mentor two interns this quarter.",
        question: "What responsibilities do I have in my job right now?",
    },
    Pair {
        first: "I volunteer at the food bank on Sunday mornings.",
        second: "Coaching the under-twelve football team on Wednesdays.",
        question: "How do I give back to my community?",
    },
];

const EVENTS: &[Event] = &[
    Event {
        told: "Had my wisdom tooth pulled this morning, I can barely talk.",
        named: "the dental surgery",
    },
    Event {
        told: "Crossed the finish line of the city half marathon in two hours!",
        named: "the long-distance race",
    },
    Event {
        told: "Signed the papers, the apartment is officially ours.",
        named: "buying our home",
    },
    Event {
        told: "My daughter was born at dawn, healthy and loud.",
        named: "the birth of my baby girl",
    },
    Event {
        told: "Passed my driving test on the second attempt.",
        named: "getting my licence",
    },
    Event {
        told: "Our flight to Buenos Aires was cancelled and we slept at the airport.",
        named: "the night stuck in the terminal",
    },
    Event {
        told: "Got the promotion to team lead today, drinks are on me.",
        named: "moving up at the office",
    },
    Event {
        told: "The storm knocked a tree onto our garage roof.",
        named: "the weather damage to the house",
    },
    Event {
        told: "Adopted two kittens from the shelter this afternoon.",
        named: "bringing the cats home",
    },
    Event {
        told: "Defended my thesis and the committee said yes.",
        named: "finishing the doctorate",
    },
];

/// How a user asks which of two events came first, or how far apart they were.
const ORDER_QUESTIONS: &[&str] = &[
    "Which came first, {a} or {b}?",
    "How much time passed between {a} and {b}?",
    "Did {a} happen before {b}?",
];

/// Questions about things these users never mention: recall should find nothing.
const UNANSWERABLE: &[&str] = &[
    "What is my blood type?",
    "Which political party do I vote for?",
    "What was my grade in high school chemistry?",
    "How many siblings does my husband have?",
    "What is the make of my washing machine?",
    "Which language did my grandfather speak as a child?",
    "What is my shoe size?",
    "Which bank holds my mortgage?",
];

/// Everyday chatter between the facts.
const SMALL_TALK: &[&str] = &[
    "The weather was lovely this afternoon.",
    "I watched a documentary about volcanoes last night.",
    "Can you remind me to buy bread tomorrow?",
    "Traffic was terrible on the bridge again.",
    "I am thinking about repainting the kitchen.",
    "The football match went to penalties.",
    "Our neighbours are throwing a party on Saturday.",
    "I need a recipe for a quick lunch.",
    "The train was late by twenty minutes.",
    "My phone battery dies so quickly lately.",
    "I tried a new coffee shop near the station.",
    "The garden needs watering before the heat wave.",
    "Any idea how to get red wine out of a carpet?",
    "What is a good podcast for a long drive?",
    "My colleague keeps humming in meetings.",
    "Could you summarise the news about the elections?",
];

/// Replies of the assistant, stored as episodes too.
const ACKS: &[&str] = &[
    "Thanks for telling me, noted.",
    "Got it. Anything else I can help with?",
    "Sounds good to me.",
    "I will keep that in mind.",
    "That is great to hear!",
];
