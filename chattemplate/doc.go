// Package chattemplate renders OpenAI chat requests with a model's chat
// template, exactly as vLLM renders them before tokenizing.
package chattemplate
