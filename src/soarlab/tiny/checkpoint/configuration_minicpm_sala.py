"""Config class of the tiny MiniCPM-SALA test model (same schema as openbmb/MiniCPM-SALA)."""

try:
    from transformers import PreTrainedConfig as _BaseConfig
except ImportError:  # transformers 4.x
    from transformers import PretrainedConfig as _BaseConfig


class MiniCPMSALAConfig(_BaseConfig):
    model_type = "minicpm_sala"
    keys_to_ignore_at_inference = ["past_key_values"]

    def __init__(
        self,
        vocab_size=73448,
        hidden_size=4096,
        intermediate_size=16384,
        num_hidden_layers=32,
        num_attention_heads=32,
        num_key_value_heads=2,
        head_dim=128,
        lightning_nh=32,
        lightning_nkv=32,
        lightning_head_dim=128,
        mixer_types=None,
        hidden_act="silu",
        rms_norm_eps=1e-6,
        scale_emb=12,
        dim_model_base=256,
        scale_depth=1.4,
        max_position_embeddings=524288,
        initializer_range=0.1,
        use_cache=True,
        tie_word_embeddings=False,
        **kwargs,
    ):
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        self.intermediate_size = intermediate_size
        self.num_hidden_layers = num_hidden_layers
        self.num_attention_heads = num_attention_heads
        self.num_key_value_heads = num_key_value_heads
        self.head_dim = head_dim
        self.lightning_nh = lightning_nh
        self.lightning_nkv = lightning_nkv
        self.lightning_head_dim = lightning_head_dim
        self.mixer_types = list(mixer_types or ["minicpm4"] * num_hidden_layers)
        self.hidden_act = hidden_act
        self.rms_norm_eps = rms_norm_eps
        self.scale_emb = scale_emb
        self.dim_model_base = dim_model_base
        self.scale_depth = scale_depth
        self.max_position_embeddings = max_position_embeddings
        self.initializer_range = initializer_range
        self.use_cache = use_cache
        super().__init__(tie_word_embeddings=tie_word_embeddings, **kwargs)
