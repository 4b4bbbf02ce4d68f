//! What one embedding model's similarities mean, measured once when it is loaded.
//!
//! Two numbers differ wildly between models:
//! - **how well it ranks**, per script: all-MiniLM-L6-v2 was trained on English and ranks
//!   Chinese paraphrases barely better than chance, while multilingual-e5 ranks them well;
//! - **where unrelated texts sit**: MiniLM scores unrelated Chinese pairs around 0.47, English
//!   ones around 0.08, e5 everything around 0.75–0.84, so one fixed `similarity_threshold`
//!   cannot mean the same for every model.
//!
//! Recall uses both, per query script: the vector list's floor is [`ScriptFit::similarity_cut`]
//! (with `recall.similarity_cut: calibrated`), and hybrid fusion weighs the vector list by
//! [`ScriptFit::vector_weight`] and the keyword list by the rest (`memory::hybrid`). Both are
//! also reported (`/v1/status` `embedding_calibration`, and a start-up log line) so an operator
//! sees what a provider switch does.
//!
//! The probe is a fixed set of short question → memory pairs below (Chinese and English, none
//! taken from any benchmark), embedded in four calls: milliseconds locally, four requests for a
//! remote provider. Accuracy is how often a question's own memory is the nearest of its
//! script's memories.

use super::cosine;
use super::small_talk::SmallTalk;
use super::{EmbedError, Embedder, TextRole};
use super::{Script, ScriptRescale};

/// The least share of hybrid fusion either list gets.
pub const MIN_LIST_WEIGHT: f32 = 0.2;

/// Question → the memory that answers it, in Chinese.
const CJK_PAIRS: [(&str, &str); 24] = [
    ("外婆住在哪里", "姥姥一直住在成都的老房子里，不愿意搬家"),
    ("孩子几点放学", "儿子的学校下午四点半下课，要去门口接"),
    ("我们家的车是什么颜色", "家里那辆SUV是白色的，去年刚买"),
    ("下周谁值班", "下个星期轮到小王守夜班"),
    ("他喜欢喝什么", "老张每天早上都要一杯不加糖的黑咖啡"),
    ("会议改到什么时候了", "周会挪到了星期四下午三点"),
    ("她怕什么动物", "小雨从小就特别害怕狗，见了就躲"),
    ("房租多少钱", "现在住的公寓每个月要交四千五"),
    ("周末去哪玩", "星期六打算带全家去郊外爬山"),
    ("他在哪家公司上班", "表哥在深圳的一家做芯片的企业工作"),
    ("猫生病了吗", "家里的橘猫这两天不吃东西，明天带去看兽医"),
    ("谁会修电脑", "隔壁的李哥以前做过网管，电脑坏了可以找他"),
    ("爷爷的生日是哪天", "爷爷的寿辰在农历八月十五，和中秋同一天"),
    ("新同事叫什么名字", "刚入职的那个姑娘叫陈思远，坐在窗边"),
    ("哪家医院看牙好", "上次拔智齿是在口腔医院，医生很耐心"),
    ("我们的暗号是什么", "游戏里集合的口令是“老地方见”"),
    ("钥匙放在哪", "备用钥匙藏在门口第二个花盆底下"),
    ("她在学什么乐器", "妹妹每周六上午去上钢琴课"),
    ("快递到了没", "网上买的书显示已经放到驿站了"),
    ("晚饭吃什么", "今晚准备做红烧肉和番茄炒蛋"),
    ("他为什么请假", "小刘这周请了病假，说是发烧了"),
    ("旅行预算多少", "这次去云南一共打算花八千块"),
    ("谁负责订机票", "出差的机票统一由行政的周姐来买"),
    ("密码提示是什么", "路由器管理页的提示写的是“宠物的名字”"),
];

/// Question → the memory that answers it, in English.
const LATIN_PAIRS: [(&str, &str); 24] = [
    (
        "where does grandma live",
        "Nana still lives in her old house in Leeds and won't move",
    ),
    (
        "when does school finish",
        "The kids get out of class at 3:30 and need picking up",
    ),
    (
        "what colour is our car",
        "Our SUV is white; we bought it last spring",
    ),
    (
        "who is on call next week",
        "Sam covers the night shift the week after this one",
    ),
    (
        "what does he drink",
        "Tom has a black coffee with no sugar every morning",
    ),
    (
        "when is the meeting now",
        "The weekly sync moved to Thursday at 3 pm",
    ),
    (
        "what animal is she scared of",
        "Amy has been terrified of dogs since she was little",
    ),
    (
        "how much is the rent",
        "The flat costs 1,450 a month including water",
    ),
    (
        "plans for the weekend",
        "On Saturday we're taking everyone hiking in the hills",
    ),
    (
        "where does he work",
        "My cousin works for a chip design firm in Austin",
    ),
    (
        "is the cat ill",
        "The ginger cat hasn't eaten for two days; vet tomorrow",
    ),
    (
        "who can fix a laptop",
        "Dave next door used to do IT support, ask him",
    ),
    (
        "when is grandpa's birthday",
        "Grandpa turns eighty on the ninth of October",
    ),
    (
        "what is the new hire called",
        "The engineer who just joined is named Priya, by the window",
    ),
    (
        "which dentist is good",
        "The clinic on Elm Street pulled my wisdom tooth painlessly",
    ),
    (
        "what is our meeting phrase",
        "In the game we regroup when someone types 'usual spot'",
    ),
    (
        "where is the spare key",
        "The spare key is under the second flower pot by the door",
    ),
    (
        "what instrument is she learning",
        "My sister has piano lessons every Saturday morning",
    ),
    (
        "has the parcel arrived",
        "The books I ordered are waiting at the pickup locker",
    ),
    (
        "what's for dinner",
        "Tonight it's roast chicken with potatoes",
    ),
    (
        "why is he off work",
        "Leo took sick leave this week with a fever",
    ),
    (
        "what is the trip budget",
        "We plan to spend about two thousand on the Lisbon trip",
    ),
    (
        "who books the flights",
        "Travel for work is always booked by Karen in admin",
    ),
    (
        "what is the password hint",
        "The router page hint says 'name of the first pet'",
    ),
];

/// How a model ranks one script's texts, and where its unrelated pairs score.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct ScriptFit {
    /// Share of probe questions whose own memory was the nearest (chance: 1/24).
    pub accuracy: f32,
    /// Mean similarity of a question to the other questions' memories.
    pub noise_floor: f32,
    /// Their standard deviation.
    pub noise_spread: f32,
}

impl ScriptFit {
    /// A cross-script fit that was never measured: no rescaling.
    pub const UNKNOWN_CROSS: ScriptFit = ScriptFit {
        accuracy: 0.0,
        noise_floor: 0.0,
        noise_spread: 0.0,
    };

    /// The lowest similarity a vector hit needs under a calibrated cut: one spread above the
    /// model's average unrelated pair. Not stricter: the quality bench's right answers sit 1–3
    /// spreads above it for Chinese questions to English memories with multilingual-e5.
    pub(crate) fn similarity_cut(&self) -> f32 {
        self.noise_floor + self.noise_spread
    }

    /// The vector list's share of hybrid fusion, from [`MIN_LIST_WEIGHT`] (a model that ranks
    /// this script at most one time in five: all-MiniLM on Chinese) to `1 - MIN_LIST_WEIGHT`
    /// (four in five or better: e5 on Chinese, MiniLM on English), linear between. Neither list
    /// ever counts for nothing: a weak list still settles the stronger list's near-ties.
    pub(crate) fn vector_weight(&self) -> f32 {
        ((self.accuracy - 0.2) / 0.6).clamp(MIN_LIST_WEIGHT, 1.0 - MIN_LIST_WEIGHT)
    }
}

/// A model's fit on Chinese (and other CJK) text and on Latin-script text, and across them:
/// Chinese questions to English memories and the reverse (the probe's pairs are translations
/// of each other, in the same order).
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Calibration {
    pub cjk: ScriptFit,
    pub latin: ScriptFit,
    pub cjk_to_latin: ScriptFit,
    pub latin_to_cjk: ScriptFit,
}

/// The least cross-script accuracy at which a search puts the other script's rows on the
/// query's scale. Below it (all-MiniLM: Chinese and English embeddings barely meet) the other
/// script's rows are noise, and lifting them to the query's scale would let them in.
pub const CROSS_MIN_ACCURACY: f32 = 0.5;

impl Calibration {
    /// What a model that was never measured is assumed to be: it counts fully and nothing is
    /// noise.
    pub const UNMEASURED: Calibration = Calibration {
        cjk: ScriptFit {
            accuracy: 1.0,
            noise_floor: -1.0,
            noise_spread: 0.0,
        },
        latin: ScriptFit {
            accuracy: 1.0,
            noise_floor: -1.0,
            noise_spread: 0.0,
        },
        cjk_to_latin: ScriptFit::UNKNOWN_CROSS,
        latin_to_cjk: ScriptFit::UNKNOWN_CROSS,
    };

    /// The fit for `query`'s script ([`Script::of`]; mixed text counts as Latin).
    pub(crate) fn for_query(&self, query: &str) -> &ScriptFit {
        match Script::of(query) {
            Script::Cjk => &self.cjk,
            Script::Latin | Script::Mixed => &self.latin,
        }
    }

    /// How a search for `query` puts rows of the other script on the query's scale: a row's
    /// similarity, as spreads above the cross-script noise, becomes the same number of spreads
    /// above the query script's noise. `None` for a mixed-script query, and when the model
    /// does not rank across scripts ([`CROSS_MIN_ACCURACY`]) or was not measured.
    pub(crate) fn rescale_for(&self, query: &str) -> Option<ScriptRescale> {
        let (own, cross, other) = match Script::of(query) {
            Script::Cjk => (&self.cjk, &self.cjk_to_latin, Script::Latin),
            Script::Latin => (&self.latin, &self.latin_to_cjk, Script::Cjk),
            Script::Mixed => return None,
        };
        if cross.accuracy < CROSS_MIN_ACCURACY
            || cross.noise_spread <= 0.0
            || own.noise_spread <= 0.0
        {
            return None;
        }
        let mul = own.noise_spread / cross.noise_spread;
        Some(ScriptRescale {
            script: other,
            mul,
            add: own.noise_floor - cross.noise_floor * mul,
        })
    }
}

/// Everything measured about a model when it is loaded.
#[derive(Debug, Clone)]
pub struct ModelFit {
    pub calibration: Calibration,
    /// Where its content-free chat sits (`embed::small_talk`).
    pub small_talk: SmallTalk,
    /// How close two memories must be to be one fact said twice (`embed::duplicates`).
    pub duplicates: super::duplicates::DuplicateBound,
}

/// The fits measured in this process, by model id and dimension: a model answers the probe
/// set the same way every time, so a second service on it (a test host, a restarted plugin
/// host) takes the fit it already has instead of measuring it again. Only a measurement that
/// succeeded is kept.
static MEASURED: std::sync::Mutex<Vec<((String, usize), ModelFit)>> =
    std::sync::Mutex::new(Vec::new());

/// [`calibrate`], once per model in this process: the fit measured before, or a new one.
/// Whether it was measured before is the second value.
pub(crate) async fn calibrate_once(
    embedder: &dyn Embedder,
) -> Result<(ModelFit, bool), EmbedError> {
    let key = (embedder.model_id().to_string(), embedder.dimension());
    let known = |measured: &[((String, usize), ModelFit)]| {
        measured
            .iter()
            .find(|(k, _)| *k == key)
            .map(|(_, fit)| fit.clone())
    };
    if let Some(fit) = known(&MEASURED.lock().unwrap_or_else(|p| p.into_inner())) {
        return Ok((fit, true));
    }
    let fit = calibrate(embedder).await?;
    let mut measured = MEASURED.lock().unwrap_or_else(|p| p.into_inner());
    if known(&measured).is_none() {
        measured.push((key, fit.clone()));
    }
    Ok((fit, false))
}

/// Measure `embedder` on the probe set (four embedding calls: each script's questions and
/// memories), place the small-talk anchors (one more call) and measure the duplicate bound
/// (one more).
pub(crate) async fn calibrate(embedder: &dyn Embedder) -> Result<ModelFit, EmbedError> {
    let cjk = embed_pairs(embedder, &CJK_PAIRS).await?;
    let latin = embed_pairs(embedder, &LATIN_PAIRS).await?;
    let small_talk = SmallTalk::measure(embedder, &cjk.0, &latin.0).await?;
    let calibration = Calibration {
        cjk: fit(&cjk.0, &cjk.1),
        latin: fit(&latin.0, &latin.1),
        cjk_to_latin: fit(&cjk.0, &latin.1),
        latin_to_cjk: fit(&latin.0, &cjk.1),
    };
    let duplicates = super::duplicates::DuplicateBound::measure(
        embedder,
        calibration.cjk.accuracy,
        calibration.latin.accuracy,
    )
    .await?;
    Ok(ModelFit {
        duplicates,
        calibration,
        small_talk,
    })
}

type Vectors = Vec<Vec<f32>>;

/// The questions' and the memories' embeddings of one script's pairs.
async fn embed_pairs(
    embedder: &dyn Embedder,
    pairs: &[(&str, &str)],
) -> Result<(Vectors, Vectors), EmbedError> {
    let questions = embedder
        .embed(
            TextRole::Query,
            pairs.iter().map(|(q, _)| q.to_string()).collect(),
        )
        .await?;
    let memories = embedder
        .embed(
            TextRole::Passage,
            pairs.iter().map(|(_, m)| m.to_string()).collect(),
        )
        .await?;
    if questions.len() != pairs.len() || memories.len() != pairs.len() {
        return Err(EmbedError::Model(
            "calibration: the embedder returned the wrong number of vectors".into(),
        ));
    }
    Ok((questions, memories))
}

/// How well `questions[i]` finds `memories[i]` among all `memories`, and where the other pairs
/// score.
fn fit(questions: &[Vec<f32>], memories: &[Vec<f32>]) -> ScriptFit {
    let mut right = 0usize;
    let mut unrelated = Vec::with_capacity(questions.len() * memories.len());
    for (i, q) in questions.iter().enumerate() {
        let sims: Vec<f32> = memories.iter().map(|m| cosine(q, m)).collect();
        let own = sims[i];
        if sims.iter().enumerate().all(|(j, s)| j == i || *s < own) {
            right += 1;
        }
        unrelated.extend(
            sims.iter()
                .enumerate()
                .filter(|(j, _)| *j != i)
                .map(|(_, s)| *s),
        );
    }
    let n = unrelated.len().max(1) as f32;
    let mean = unrelated.iter().sum::<f32>() / n;
    let var = unrelated.iter().map(|s| (s - mean).powi(2)).sum::<f32>() / n;
    ScriptFit {
        accuracy: right as f32 / questions.len().max(1) as f32,
        noise_floor: mean,
        noise_spread: var.sqrt(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::future::BoxFuture;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A model of 8 dimensions whose vectors come from the text's characters, counting its
    /// calls.
    struct Counted(&'static str, AtomicUsize);

    impl Embedder for Counted {
        fn model_id(&self) -> &str {
            self.0
        }
        fn dimension(&self) -> usize {
            8
        }
        fn embed(
            &self,
            _role: TextRole,
            texts: Vec<String>,
        ) -> BoxFuture<'_, Result<Vec<Vec<f32>>, EmbedError>> {
            self.1.fetch_add(1, Ordering::SeqCst);
            let vectors = texts
                .iter()
                .map(|t| {
                    let mut v = vec![0.1f32; 8];
                    for c in t.chars() {
                        v[c as usize % 8] += 1.0;
                    }
                    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
                    v.into_iter().map(|x| x / norm).collect()
                })
                .collect();
            Box::pin(async move { Ok(vectors) })
        }
    }

    #[tokio::test]
    async fn a_model_is_measured_once_per_process_and_another_model_again() {
        let first = Counted("test-calibrate-once-a", AtomicUsize::new(0));
        let (fit, before) = calibrate_once(&first).await.unwrap();
        assert!(!before);
        let calls = first.1.load(Ordering::SeqCst);
        assert!(calls >= 4, "{calls} calls");
        let again = Counted("test-calibrate-once-a", AtomicUsize::new(0));
        let (same, before) = calibrate_once(&again).await.unwrap();
        assert!(before);
        assert_eq!(again.1.load(Ordering::SeqCst), 0);
        assert_eq!(same.calibration, fit.calibration);
        let other = Counted("test-calibrate-once-b", AtomicUsize::new(0));
        let (_, before) = calibrate_once(&other).await.unwrap();
        assert!(!before);
        assert_eq!(other.1.load(Ordering::SeqCst), calls);
    }

    #[test]
    fn a_query_counts_as_cjk_when_a_third_of_its_letters_are() {
        let c = Calibration {
            cjk: ScriptFit {
                accuracy: 0.1,
                noise_floor: 0.0,
                noise_spread: 0.0,
            },
            ..Calibration::UNMEASURED
        };
        assert_eq!(c.for_query("妈妈有什么药不能用？").accuracy, 0.1);
        assert_eq!(c.for_query("ZX-99812 订单").accuracy, 0.1);
        assert_eq!(c.for_query("where is the 4B会议室 room").accuracy, 1.0);
        assert_eq!(c.for_query("???").accuracy, 1.0);
    }

    /// multilingual-e5's measured scales (rounded): Chinese pairs sit near 0.84 ± 0.014,
    /// Chinese questions to English memories near 0.73 ± 0.023.
    fn e5_like(cross_accuracy: f32) -> Calibration {
        let fit = |accuracy, noise_floor, noise_spread| ScriptFit {
            accuracy,
            noise_floor,
            noise_spread,
        };
        Calibration {
            cjk: fit(0.92, 0.84, 0.014),
            latin: fit(0.71, 0.75, 0.025),
            cjk_to_latin: fit(cross_accuracy, 0.73, 0.023),
            latin_to_cjk: fit(0.96, 0.74, 0.020),
        }
    }

    #[test]
    fn the_other_scripts_noise_lands_on_the_query_scripts_noise() {
        let r = e5_like(0.62).rescale_for("妈妈的眼镜度数是多少").unwrap();
        assert_eq!(r.script, Script::Latin);
        // Cross noise maps to own noise, and three cross spreads above it to three own spreads.
        assert!((r.apply(Script::Latin, 0.73) - 0.84).abs() < 1e-5);
        assert!((r.apply(Script::Latin, 0.73 + 3.0 * 0.023) - (0.84 + 3.0 * 0.014)).abs() < 1e-5);
        assert_eq!(r.apply(Script::Cjk, 0.9), 0.9);
        // An English question rescales Chinese rows with the reverse fit.
        let r = e5_like(0.62)
            .rescale_for("when is grandma's birthday")
            .unwrap();
        assert_eq!(r.script, Script::Cjk);
        assert!((r.apply(Script::Cjk, 0.74) - 0.75).abs() < 1e-5);
    }

    #[test]
    fn no_rescale_for_a_model_that_does_not_rank_across_scripts_or_was_not_measured() {
        assert_eq!(e5_like(0.3).rescale_for("妈妈的眼镜度数是多少"), None);
        assert_eq!(
            Calibration::UNMEASURED.rescale_for("妈妈的眼镜度数是多少"),
            None
        );
        assert_eq!(Calibration::UNMEASURED.rescale_for("when"), None);
        assert_eq!(
            e5_like(0.62).rescale_for("where is the 4B会议室 room"),
            None
        );
    }

    #[test]
    fn weight_runs_from_the_minimum_near_chance_to_its_complement_for_a_good_ranker() {
        let fit = |accuracy| ScriptFit {
            accuracy,
            noise_floor: 0.1,
            noise_spread: 0.05,
        };
        assert_eq!(fit(0.05).vector_weight(), MIN_LIST_WEIGHT);
        assert_eq!(fit(0.2).vector_weight(), MIN_LIST_WEIGHT);
        assert_eq!(fit(0.95).vector_weight(), 1.0 - MIN_LIST_WEIGHT);
        assert!((fit(0.5).vector_weight() - 0.5).abs() < 1e-6);
        assert!((fit(0.3).similarity_cut() - 0.15).abs() < 1e-6);
    }
}
