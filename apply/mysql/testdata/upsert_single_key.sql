INSERT INTO `shop`.`orders` (`id`, `customer`, `total`, `photo`, `placed_at`) VALUES
(1, 'O''Brien \ "x"', 12.50, X'00ff27', '2024-01-02 03:04:05.000000'),
(2, NULL, -0.01, X'', NULL),
(18446744073709551615, '', 1e-5, X'62', '2024-01-02 03:04:05.123456')
ON DUPLICATE KEY UPDATE `customer` = VALUES(`customer`), `total` = VALUES(`total`), `photo` = VALUES(`photo`), `placed_at` = VALUES(`placed_at`)
