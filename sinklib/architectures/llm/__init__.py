"""10_llm, dense LLMs: where the sink sits (first token, BOS, delimiters; placement), the survey across models
(llm_survey), its plots, and the "What we saw" paragraphs written from the run (takeaways)."""
