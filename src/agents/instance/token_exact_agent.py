"""The token-exact sampling agent: replies sampled from a language model, recorded as the
trajectories the trainer scores.

The first prompt is the chat template's rendering of the system prompt and the first
user message. Every later turn appends: the sampled ids (mask 1), then the template's
closing ids that the reply did not sample (all of them, end-of-turn token first, when
the token limit cut the reply off) and the ids that open the next user turn and the new
assistant turn (mask 0). The whole chat is never re-rendered, so what is trained on
is exactly what the model was fed.

An episode whose environment offers tools (a `ToolEnvironment`, src/tasks/tool_episode.py)
is rendered with them, one of two ways (src/language_models/tool_calls.py):
- native, where the chat template renders tools: the first prompt is
  `apply_chat_template(..., tools=...)`, and tool results go to the model as `tool`
  messages, rendered by the template after the closed reply (`render_continuation`);
- prompted, otherwise (the embedded SmolLM2): the system message ends with the preamble
  that describes the tools and the `<tool_call>` format, and tool results go to the model
  as the user turn of `<tool_response>` blocks that the environment's observation is.
Either way the model writes its calls as Hermes blocks, which the environment reads, and
the trajectory is appended turn by turn as for any episode. The rendering is
src/language_models/chat_template.py's `ToolChat`, which the supervised stage tokenises a
tool episode's demonstration with.
"""

from __future__ import annotations

from collections.abc import Sequence

from src.agents.agent import AgentReply, SamplingAgent
from src.configuration.components import COMPONENTS
from src.language_models.chat_template import ToolChat, probe_turn_boundary, render_chat
from src.language_models.language_model import (
    LanguageModel,
    NewTokens,
    SamplingParams,
    Temperature,
    TopP,
)
from src.language_models.tool_calls import template_renders_tools
from src.records.chat import Role
from src.records.episode import Episode, EpisodeStatus, ToolEnvironment
from src.records.trajectory import Trajectory


@COMPONENTS.register("lora_rl_agent")
class TokenExactAgent(SamplingAgent):
    """Samples each episode's replies from a language model and records them token-exact
    (ids, log-probs, sampling temperature, policy version): the trainer scores exactly
    what the model was fed. The supervised stage tokenises demonstrations the same way."""

    def __init__(
        self,
        language_model: LanguageModel,  # the policy, or a rollout pool that serves it
        system_prompt: str | None = None,  # rendered by the chat template before the chat
        temperature: Temperature = 1.0,  # 0: greedy (evaluation only: RL cannot train on it)
        top_p: TopP = 1.0,  # must be 1 for RL training (the update refuses nucleus samples)
        # the generation budget per turn; also Dr. GRPO's default `ppo.norm_length`. An
        # episode whose next prompt plus this would not fit the model's context ends as
        # `agent_context_limit`
        max_new_tokens: NewTokens = 256,
    ) -> None:
        self.language_model = language_model
        self.system_prompt = system_prompt
        self.sampling = SamplingParams(temperature=temperature, top_p=top_p,
                                       max_new_tokens=max_new_tokens)
        self._turn_boundary = probe_turn_boundary(language_model, system_prompt)
        self._renders_tools = template_renders_tools(language_model.tokenizer)
        # the running tool episodes: id(episode) -> (the episode, held until it has ended,
        # and its rendering)
        self._tool_chats: dict[int, tuple[Episode, ToolChat]] = {}

    # ---- templating ----------------------------------------------------------------
    def _render(self, chat: Sequence[tuple[str, str]], generation_prompt: bool) -> str:
        return render_chat(self.language_model, self.system_prompt, chat, generation_prompt)

    def _encode(self, text: str) -> list[int]:
        return self.language_model.tokenizer(text, add_special_tokens=False)["input_ids"]

    # ---- Agent hooks ---------------------------------------------------------------
    def _turns_before(self, episode: Episode) -> list[tuple[str, str]]:
        """Turns rendered before the episode's chat, e.g. earlier solved episodes: none."""
        return []

    def _start_episode(self, episode: Episode) -> None:
        first = episode.chat[0]
        before = self._turns_before(episode)
        trajectory = Trajectory(turns_before=before)
        tools = (episode.environment.tool_schemas() if isinstance(episode.environment, ToolEnvironment)
                 else [])
        if tools:
            self._forget_ended_episodes()
            chat = ToolChat.start(self.language_model, self.system_prompt, tools,
                                  self._renders_tools, [*before, ("user", first.content)])
            self._tool_chats[id(episode)] = (episode, chat)
            trajectory.append_context(self._encode(chat.render()))
        else:
            trajectory.append_context(self._encode(self._render(
                [*before, ("user", first.content)], True)))
        episode.trajectory = trajectory
        episode.info["template_consistent"] = True
        episode.metrics["template_inconsistent"] = 0.0
        trajectory.messages_fed = 1

    def _append_observation(self, episode: Episode) -> None:
        """Append the ids for the user messages the agent has not seen yet."""
        trajectory = episode.trajectory
        assert trajectory is not None
        new_messages = episode.chat[trajectory.messages_fed:]
        if not new_messages:
            return
        if new_messages[0].role is not Role.AGENT or any(
                message.role is not Role.USER for message in new_messages[1:]):
            raise RuntimeError("expected the agent's reply followed by user messages")
        # Whether the turn ended is read from the sampled ids: a reply cut off by the token
        # limit may decode to a prefix of the closing text ("<") without having ended.
        last_start, _ = trajectory.turn_spans[-1]
        ids = self._turn_boundary.closing_after(trajectory.token_ids[last_start:])
        tool_chat = self._tool_chats.get(id(episode), (None, None))[1]
        if tool_chat is None:
            for message in new_messages[1:]:
                ids += self._encode(self._turn_boundary.opening_text(message.content))
        else:
            task = episode.environment
            ids += self._encode(tool_chat.continue_after(
                new_messages[0].content,
                task.tool_results() if isinstance(task, ToolEnvironment) else None,
                [message.content for message in new_messages[1:]]))
        trajectory.append_context(ids)
        trajectory.messages_fed = len(episode.chat)
        # Diagnostic, averaged into the metrics by the loop: do the fed ids decode to the
        # template's rendering of the chat? Once they differ, later turns cannot repair it.
        rendered = (tool_chat.render() if tool_chat is not None else
                    self._render([*trajectory.turns_before,
                                  *[(m.role.value, m.content) for m in episode.chat]], True))
        fed = self.language_model.tokenizer.decode(trajectory.token_ids,
                                                   skip_special_tokens=False)
        consistent = episode.info["template_consistent"] and rendered == fed
        episode.info["template_consistent"] = consistent
        episode.metrics["template_inconsistent"] = 0.0 if consistent else 1.0

    # ---- tool episodes -------------------------------------------------------------
    def _forget_ended_episodes(self) -> None:
        for key, (episode, _) in list(self._tool_chats.items()):
            if not episode.running:
                del self._tool_chats[key]

    def _act(self, episodes: Sequence[Episode]) -> list[AgentReply]:
        model = self.language_model
        replies: list[AgentReply | None] = [None] * len(episodes)
        prompts, waiting = [], []
        for index, episode in enumerate(episodes):
            self._append_observation(episode)
            trajectory = episode.trajectory
            assert trajectory is not None
            if len(trajectory.token_ids) + self.sampling.max_new_tokens > model.max_context_tokens:
                replies[index] = AgentReply(None, EpisodeStatus.AGENT_CONTEXT_LIMIT)
                continue
            prompts.append(trajectory.token_ids)
            waiting.append(index)
        generations = model.generate(prompts, self.sampling) if prompts else []
        for index, [generation] in zip(waiting, generations, strict=True):
            episode = episodes[index]
            assert episode.trajectory is not None
            sampling = self.sampling  # recorded: the trainer scores under the same distribution
            episode.trajectory.append_sampled(generation.token_ids, generation.logprobs,
                                              generation.finish_reason,
                                              generation.policy_version, sampling.temperature,
                                              sampling.top_p, sampling.max_new_tokens)
            replies[index] = AgentReply(self._reply_text(generation))
        return [reply for reply in replies if reply is not None]
