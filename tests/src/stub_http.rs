//! A scripted HTTP/1.1 server on 127.0.0.1 for tests that need a provider's API: each
//! connection gets the next scripted reply (the last one repeats) — or, from
//! [`StubServer::answering`], the reply a function chooses for the request, to play a model
//! — and every request is recorded. Replies can be slow or drop the connection, to test
//! timeouts and retries.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// One scripted reply.
#[derive(Debug, Clone)]
pub enum Reply {
    /// Answer with a status, extra headers and a body.
    Answer {
        /// HTTP status.
        status: u16,
        /// Extra headers.
        headers: Vec<(String, String)>,
        /// The body (bytes, so a test can send what is not UTF-8).
        body: Vec<u8>,
    },
    /// Wait, then reply.
    Slow(Duration, Box<Reply>),
    /// Close the connection without answering.
    Drop,
}

impl Reply {
    /// `200` with a JSON body.
    pub fn json(body: serde_json::Value) -> Self {
        Reply::status(200, &body.to_string())
    }

    /// An OpenAI-compatible chat completion saying `text` (model `stub-model-2025`, 12
    /// prompt and 3 completion tokens).
    pub fn openai_chat(text: &str) -> Self {
        Reply::json(serde_json::json!({
            "id": "chatcmpl-1", "object": "chat.completion", "model": "stub-model-2025",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15}
        }))
    }

    /// `status` with `body`.
    pub fn status(status: u16, body: &str) -> Self {
        Reply::bytes(status, body.as_bytes())
    }

    /// `status` with `body` as given, UTF-8 or not.
    pub fn bytes(status: u16, body: &[u8]) -> Self {
        Reply::Answer {
            status,
            headers: Vec::new(),
            body: body.to_vec(),
        }
    }

    /// This reply with one more header.
    pub fn header(self, name: &str, value: &str) -> Self {
        match self {
            Reply::Answer {
                status,
                mut headers,
                body,
            } => {
                headers.push((name.to_string(), value.to_string()));
                Reply::Answer {
                    status,
                    headers,
                    body,
                }
            }
            other => other,
        }
    }
}

/// A request the server received.
#[derive(Debug, Clone)]
pub struct Seen {
    /// Method and path, e.g. `POST /v1/chat/completions`.
    pub line: String,
    /// Headers, names lower-cased.
    pub headers: Vec<(String, String)>,
    /// The body.
    pub body: String,
}

impl Seen {
    /// The value of header `name` (lower case), if sent.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// The body as JSON.
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).expect("a JSON body")
    }
}

/// A running stub server; it lives as long as the test process.
pub struct StubServer {
    port: u16,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl StubServer {
    /// Serve `script` on a free port of 127.0.0.1.
    pub fn start(script: Vec<Reply>) -> Self {
        assert!(!script.is_empty(), "a script needs a reply");
        Self::serve_with(move |n, _| script[n.min(script.len() - 1)].clone())
    }

    /// Serve on a free port of 127.0.0.1, answering each request with what `respond`
    /// makes of it.
    pub fn answering(respond: impl Fn(&Seen) -> Reply + Send + Sync + 'static) -> Self {
        Self::serve_with(move |_, request| respond(request))
    }

    /// Serve, answering connection `n` with `choose(n, request)`.
    fn serve_with(choose: impl Fn(usize, &Seen) -> Reply + Send + Sync + 'static) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1");
        let port = listener.local_addr().expect("address").port();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = seen.clone();
        let choose = Arc::new(choose);
        std::thread::spawn(move || {
            for (n, stream) in listener.incoming().enumerate() {
                let Ok(stream) = stream else { continue };
                let (log, choose) = (log.clone(), choose.clone());
                std::thread::spawn(move || serve(stream, |request| choose(n, request), &log));
            }
        });
        Self { port, seen }
    }

    /// `http://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The requests received so far.
    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().expect("requests").clone()
    }
}

fn serve(stream: TcpStream, choose: impl Fn(&Seen) -> Reply, log: &Mutex<Vec<Seen>>) {
    let Some(request) = read_request(&stream) else {
        return;
    };
    let reply = choose(&request);
    log.lock().expect("requests").push(request);
    answer(stream, reply);
}

fn read_request(stream: &TcpStream) -> Option<Seen> {
    let mut reader = BufReader::new(stream.try_clone().ok()?);
    let mut line = String::new();
    reader.read_line(&mut line).ok()?;
    let request_line = line.trim().rsplit_once(' ')?.0.to_string();
    let mut headers = Vec::new();
    loop {
        line.clear();
        if reader.read_line(&mut line).ok()? == 0 || line == "\r\n" {
            break;
        }
        if let Some((name, value)) = line.split_once(':') {
            headers.push((name.trim().to_ascii_lowercase(), value.trim().to_string()));
        }
    }
    let length = headers
        .iter()
        .find(|(n, _)| n == "content-length")
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    let mut body = vec![0; length];
    reader.read_exact(&mut body).ok()?;
    Some(Seen {
        line: request_line,
        headers,
        body: String::from_utf8_lossy(&body).into_owned(),
    })
}

fn answer(mut stream: TcpStream, reply: Reply) {
    match reply {
        Reply::Drop => {}
        Reply::Slow(wait, then) => {
            std::thread::sleep(wait);
            answer(stream, *then);
        }
        Reply::Answer {
            status,
            headers,
            body,
        } => {
            let mut head = format!(
                "HTTP/1.1 {status} Stub\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n",
                body.len()
            );
            for (name, value) in headers {
                head.push_str(&format!("{name}: {value}\r\n"));
            }
            head.push_str("\r\n");
            let _ = stream.write_all(head.as_bytes());
            let _ = stream.write_all(&body);
        }
    }
}
