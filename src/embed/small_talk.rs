//! How much a message looks like chat that asks for no memory, on one model's own scale.
//!
//! Greetings, thanks, laughter, "收到", "+1" and emoji ask nothing of a memory, yet every
//! embedding model puts them near some memory: multilingual-e5 scores 早上好呀 against a
//! group's memories as high as many real questions score against their answers, so no
//! similarity floor on the memories alone tells them apart (measured in docs/benchmarks.md).
//! What does tell them apart is what the message is closest to. The model embeds a fixed set
//! of content-free chat lines ([`ANCHORS`], written for this purpose and disjoint from the
//! quality bench's small-talk lines) once, beside the calibration probe; a message's *chat
//! closeness* is its best similarity to them, measured in spreads above where the probe's real
//! questions sit ([`ChatLevel`]). `memory::relevance` weighs it against how far the best
//! memory stands above the model's unrelated pairs.

use super::Script;
use super::{EmbedError, Embedder, TextRole};

/// Content-free chat lines in Chinese and English: greetings, acknowledgements, laughter,
/// thanks, farewells, reactions and emoji.
pub const ANCHORS: [&str; 106] = [
    "早",
    "早安",
    "上午好",
    "中午好",
    "下午好",
    "晚上好",
    "大家好",
    "你好",
    "在吗",
    "哈哈",
    "哈哈哈",
    "呵呵",
    "嘿嘿",
    "笑哭了",
    "好的",
    "好滴",
    "行",
    "可以",
    "OK",
    "嗯",
    "哦",
    "噢噢",
    "对对对",
    "是的",
    "没错",
    "收到了",
    "了解",
    "明白",
    "知道啦",
    "谢谢",
    "多谢",
    "感谢",
    "不客气",
    "没事",
    "辛苦啦",
    "晚安",
    "拜拜",
    "回头聊",
    "下次见",
    "先撤了",
    "溜了",
    "我来了",
    "来了来了",
    "666",
    "牛啊",
    "厉害了",
    "绝了",
    "太强了",
    "好吧",
    "唉",
    "无语",
    "好累啊",
    "困死了",
    "饿了",
    "加油",
    "恭喜",
    "干杯",
    "+1",
    "顶",
    "1",
    "？？",
    "。。。",
    "hi",
    "hello",
    "hey there",
    "morning",
    "good evening",
    "night night",
    "bye",
    "see ya",
    "cya later",
    "thanks",
    "thank you so much",
    "thx",
    "np",
    "no worries",
    "ok",
    "okay",
    "kk",
    "sure",
    "yep",
    "yeah",
    "nope",
    "lol",
    "lmao",
    "haha",
    "hahaha",
    "nice",
    "cool",
    "wow",
    "omg",
    "awesome",
    "great job",
    "congrats",
    "gg",
    "wp",
    "same",
    "me too",
    "fair enough",
    "true",
    "agreed",
    "😂",
    "👍",
    "🙏",
    "❤️",
    "🎉",
];

/// Where real questions sit against the anchors, for one script: the mean and spread of the
/// calibration probe's questions' best anchor similarity.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct ChatLevel {
    pub floor: f32,
    pub spread: f32,
}

/// The anchors' vectors and the levels of both scripts.
#[derive(Debug, Clone)]
pub struct SmallTalk {
    anchors: Vec<Vec<f32>>,
    pub cjk: ChatLevel,
    pub latin: ChatLevel,
}

impl SmallTalk {
    /// Embed the anchors (one call) and place the probe's questions (already embedded by the
    /// calibration) against them.
    pub(crate) async fn measure(
        embedder: &dyn Embedder,
        cjk_questions: &[Vec<f32>],
        latin_questions: &[Vec<f32>],
    ) -> Result<SmallTalk, EmbedError> {
        let anchors = embedder
            .embed(
                TextRole::Query,
                ANCHORS.iter().map(|a| a.to_string()).collect(),
            )
            .await?;
        if anchors.len() != ANCHORS.len() {
            return Err(EmbedError::Model(
                "small-talk anchors: the embedder returned the wrong number of vectors".into(),
            ));
        }
        let mut measured = SmallTalk {
            anchors,
            cjk: ChatLevel {
                floor: 0.0,
                spread: 0.0,
            },
            latin: ChatLevel {
                floor: 0.0,
                spread: 0.0,
            },
        };
        measured.cjk = measured.level_of(cjk_questions);
        measured.latin = measured.level_of(latin_questions);
        Ok(measured)
    }

    fn level_of(&self, questions: &[Vec<f32>]) -> ChatLevel {
        let best: Vec<f32> = questions.iter().map(|q| self.closeness(q)).collect();
        let n = best.len().max(1) as f32;
        let floor = best.iter().sum::<f32>() / n;
        let var = best.iter().map(|s| (s - floor).powi(2)).sum::<f32>() / n;
        ChatLevel {
            floor,
            spread: var.sqrt(),
        }
    }

    /// The best similarity of a (unit-length) query vector to the anchors.
    pub(crate) fn closeness(&self, query: &[f32]) -> f32 {
        self.anchors
            .iter()
            .map(|a| a.iter().zip(query).map(|(x, y)| x * y).sum::<f32>())
            .fold(f32::MIN, f32::max)
    }

    /// How many spreads above real questions' level `query` sits for a text of `script`
    /// (mixed text counts as Latin, as in the calibration). 0 when the level has no spread.
    pub(crate) fn chat_z(&self, query: &[f32], script: Script) -> f32 {
        let level = match script {
            Script::Cjk => self.cjk,
            Script::Latin | Script::Mixed => self.latin,
        };
        if level.spread <= 0.0 {
            return 0.0;
        }
        (self.closeness(query) - level.floor) / level.spread
    }
}
