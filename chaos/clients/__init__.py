"""The clients the suites drive: one HTTP request with its deadlines, the official OpenAI
client, and workloads (conversations, bursts, background streams) recorded into the history."""
