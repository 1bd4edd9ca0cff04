INSERT INTO `shop`.`orders` (`id`, `total`, `placed_at`) VALUES
(1, 12.50, '2024-01-02 03:04:05.000000'),
(2, -0.01, NULL)
ON DUPLICATE KEY UPDATE `total` = VALUES(`total`), `placed_at` = VALUES(`placed_at`)
