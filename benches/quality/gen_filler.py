#!/usr/bin/env python3
"""Writes filler.jsonl: chat-like ZH/EN/mixed memories that answer none of the questions.

Only the filler is generated; the facts, look-alikes and questions are hand-written. The
people, places and things here are drawn from pools that the hand-written facts do not use,
so a filler row may share a topic or words with a question but never answers it. Deterministic
(fixed seed); rows are interleaved over the scopes so any prefix (SCOPEMEM_BENCH_QUICK takes
the first 300) is spread over all of them.

    python3 benches/quality/gen_filler.py > benches/quality/filler.jsonl
"""
import json
import random

SCOPES = ["家人", "工作", "游戏群", "同学", "public"]
PER_SCOPE = 480

ZH_WHO = ["小何", "老孙", "阿梅", "小彭", "老钱", "阿豪", "小蒋", "阿珍", "老马", "小邓", "二婶",
          "三叔", "表嫂", "堂妹", "小董", "阿斌", "老范", "小宋", "阿琳", "老葛", "小韦", "阿坤"]
EN_WHO = ["Tony", "Sarah", "Jason", "Emily", "Ryan", "Olivia", "Nathan", "Chloe", "Ethan",
          "Hannah", "Leo", "Mia", "Oscar", "Ruby", "Victor", "Zoe"]
ZH_FOOD = ["螺蛳粉", "煲仔饭", "酸菜鱼", "肠粉", "烤冷面", "麻辣烫", "糖水", "羊肉串", "生煎", "凉皮",
           "臭豆腐", "兰州拉面", "卤肉饭", "烧鹅", "椰子鸡"]
EN_FOOD = ["ramen", "tacos", "pho", "dumplings", "fish and chips", "bibimbap", "pad thai",
           "a burrito", "sushi", "lasagna"]
ZH_PLACE = ["顺德", "桂林", "洱海", "青岛", "黄山", "西安", "泉州", "长白山", "敦煌", "景德镇",
            "汕头", "凤凰古城", "稻城", "北海", "乌镇"]
EN_PLACE = ["Lisbon", "Kyoto", "Chiang Mai", "Bali", "Seoul", "Istanbul", "Reykjavik",
            "Hanoi", "Prague", "Cape Town"]
ZH_THING = ["空气炸锅", "扫地机器人", "电动牙刷", "投影仪", "加湿器", "折叠自行车", "按摩椅",
            "电热毯", "净水器", "蓝牙音箱", "露营帐篷", "咖啡机"]
EN_THING = ["air fryer", "robot vacuum", "e-reader", "standing desk", "drone", "mechanical keyboard",
            "rice cooker", "tent", "smartwatch", "espresso machine"]
ZH_SHOW = ["《繁花》", "《漫长的季节》", "《狂飙》", "《庆余年》", "《流浪地球》", "《长安三万里》",
           "《三体》", "《隐秘的角落》"]
EN_SHOW = ["Dune", "The Bear", "Severance", "Oppenheimer", "Arcane", "Succession", "Shogun"]
ZH_SPORT = ["羽毛球", "游泳", "夜跑", "飞盘", "攀岩", "骑行", "乒乓球", "瑜伽", "爬山", "跳绳"]
EN_SPORT = ["badminton", "bouldering", "tennis", "running", "yoga", "cycling", "pickleball"]
ZH_TIME = ["明天", "这周六", "下周一", "周末", "月底", "下个月初", "后天晚上", "过两天", "今天下午"]
EN_TIME = ["tomorrow", "this Saturday", "next Monday", "over the weekend", "at the end of the month",
           "tonight", "next week"]
ZH_FEEL = ["还不错", "一般般", "有点失望", "超出预期", "性价比很高", "不太推荐", "值得再去"]
NUM = ["两", "三", "四", "五", "六", "八", "十"]

ZH = [
    "{w}说{f}还是{p}的最正宗，下次去要专门找一家吃",
    "{w}{t}想去{p}玩几天，在问有没有人一起",
    "{w}新买了个{th}，用了一周觉得{fe}",
    "{w}最近在追{s}，说后面几集{fe}",
    "{w}每周{n}次{sp}，说比吃保健品管用",
    "{t}{w}要搬家，问大家有没有靠谱的搬家公司",
    "{w}说楼下新开的{f}店{fe}，排队的人不少",
    "{w}的{th}坏了，售后说要寄回去修{n}天",
    "{w}在纠结要不要换个{th}，预算一千以内",
    "{w}去{p}出差，带回来一箱特产分给大家",
    "{w}说{s}的原著比剧好看，推荐先看书",
    "{w}{t}约了{w2}去打{sp}，场地已经订好了",
    "{w}在学做{f}，第一次做得太咸了",
    "{w}说{p}这个季节人太多，建议错峰去",
    "{w}把{th}挂闲鱼上了，{n}百块出",
    "{w}感冒好了，说这次咳了{n}天才好",
    "{w}{t}生日，想找个地方吃{f}",
    "{w}说最近睡前刷手机太久，打算戒掉",
    "{w}的车限号，{t}要坐地铁上班",
    "{w}报了个{sp}班，一节课一百多",
    "{w}说{p}的民宿比酒店划算，推荐住古城外面",
    "{w}家的绿萝养了{n}年了，越长越旺",
    "{w}最近在减肥，晚饭只吃水果和鸡胸肉",
    "{w}刚考完驾照科目二，{fe}",
    "{w}说今年的荔枝比去年便宜，{n}块一斤",
    "{w}推荐了一个记账APP，说用了半年{fe}",
    "{w}的孩子在学{sp}，周末要去上课",
    "{w}说{s}里那个配角演得最好",
    "{t}可能有雷阵雨，{w}提醒大家带伞",
    "{w}说小区门口那家{f}换老板了，味道变了",
    "{w}在网上买的{th}发错货了，正在退",
    "{w}跟{w2}打赌，输了的请吃{f}",
    "{w}去{p}拍的照片发在群相册里了",
    "{w}说{th}双十一比平时便宜{n}百",
    "{w}最近迷上了拼乐高，一套拼了{n}个晚上",
    "{w}{t}要去体检，前一晚不能吃东西",
    "{w}的猫咪绝育了，恢复得{fe}",
    "{w}问有没有人知道附近哪里修鞋",
    "{w}在{p}转机，说机场的{f}{fe}",
    "{w}想报个夜校学日语，在比较几家机构",
]
EN = [
    "{W} says the best {F} in town is at the place behind the bus station",
    "{W} is going to {P} {T} and asked if anyone wants to come",
    "{W} bought a {TH} last week and thinks it was worth it",
    "{W} finally finished watching {S}, no spoilers please",
    "{W} plays {SP} twice a week after work",
    "{W}'s {TH} stopped working, the repair shop needs a week",
    "{W} recommends trying {F} at the night market",
    "{W} is moving {T} and needs help carrying boxes",
    "{W} thinks {S} is overrated",
    "{W} lost a bet to {W2} and owes everyone {F}",
    "{W} is learning to cook {F} from YouTube videos",
    "{W} says {P} is too crowded in summer, go in spring",
    "{W} is selling an old {TH}, make an offer",
    "{W} signed up for a {SP} class on Thursday evenings",
    "{W} got back from {P} with way too many souvenirs",
    "{W} started a 30-day no sugar challenge",
    "{W} says the new coffee shop downstairs has great oat lattes",
    "{W} has a dentist appointment {T}",
    "{W} recommends the audiobook version of {S}",
    "{W}'s flight to {P} was delayed by three hours",
    "{W} is looking for a cheap {TH} for the dorm",
    "{W} ran a half marathon and is still sore",
    "{W} adopted a rescue dog called Biscuit",
    "{W} keeps forgetting to water the plants",
]
MIXED = [
    "{w}说{T}想去{P}，有人一起吗",
    "{w}的{TH}到了，说比想象中{fe}",
    "{W}说{f}太辣了，吃完一直喝水",
    "{w}周末在家补{S}，说剧情{fe}",
    "{W}下周去{p}出差，问有什么好吃的",
    "{w}在找{SP}搭子，{t}晚上有空",
]


def fill(tpl, rng):
    return tpl.format(
        w=rng.choice(ZH_WHO), w2=rng.choice(ZH_WHO), W=rng.choice(EN_WHO), W2=rng.choice(EN_WHO),
        f=rng.choice(ZH_FOOD), F=rng.choice(EN_FOOD), p=rng.choice(ZH_PLACE), P=rng.choice(EN_PLACE),
        th=rng.choice(ZH_THING), TH=rng.choice(EN_THING), s=rng.choice(ZH_SHOW), S=rng.choice(EN_SHOW),
        sp=rng.choice(ZH_SPORT), SP=rng.choice(EN_SPORT), t=rng.choice(ZH_TIME), T=rng.choice(EN_TIME),
        fe=rng.choice(ZH_FEEL), n=rng.choice(NUM),
    )


def main():
    rng = random.Random(21)
    seen = set()
    rows = {s: [] for s in SCOPES}
    for scope in SCOPES:
        while len(rows[scope]) < PER_SCOPE:
            r = rng.random()
            pool = ZH if r < 0.65 else EN if r < 0.9 else MIXED
            text = fill(rng.choice(pool), rng)
            if text in seen:
                continue
            seen.add(text)
            rows[scope].append(text)
    for i in range(PER_SCOPE):
        for scope in SCOPES:
            print(json.dumps({"scope": scope, "text": rows[scope][i]}, ensure_ascii=False))


if __name__ == "__main__":
    main()
